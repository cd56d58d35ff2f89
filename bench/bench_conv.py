#!/usr/bin/env python3
"""tfprov's GPU conv benchmark: the guide's Keras model, measured properly.

Model: Conv2D(32, 3) on 256x256x3 input, MaxPool, Flatten, Dense(10);
one step = forward + gradient (tf.GradientTape) + optimizer update.

Done right where the guide's loop was not:
  * checks tf.config.list_physical_devices('GPU') first: no GPU means no
    number at all (a CPU figure must never pass for a GPU one);
  * the step is a tf.function (graph, not eager dispatch);
  * warm-up steps (tracing, autotuning, allocator growth) are not timed;
  * the clock is read only after the device finished: the loss of the last
    step is copied to the host with .numpy(), which blocks until the GPU
    queue is drained (the guide timed kernel dispatch, not compute);
  * mixed_float16 uses a LossScaleOptimizer, as Keras requires.

Output: exactly one JSON object on stdout. Exit 0 with {"ok": true, ...};
exit 3 with {"ok": false, "reason": ...} when TensorFlow is missing or sees
no GPU; exit 1 on any other failure (also with a JSON object).
"""
import argparse
import json
import os
import sys
import time

EXIT_NO_GPU = 3


def emit(obj, code):
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()
    sys.exit(code)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--precision", choices=["fp32", "mixed_float16"], default="fp32")
    a = p.parse_args(argv)
    if a.batch_size < 1 or a.steps < 1 or a.warmup < 0:
        p.error("--batch-size and --steps must be >= 1, --warmup >= 0")
    return a


def build_info(tf):
    try:
        info = dict(tf.sysconfig.get_build_info())
    except Exception:  # older TF or a CPU build
        info = {}
    return info.get("cuda_version"), info.get("cudnn_version")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except Exception as e:  # ImportError, or a broken install raising anything
        emit({"ok": False, "reason": f"cannot import tensorflow: {e}"}, EXIT_NO_GPU)

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        emit({"ok": False, "reason": "TensorFlow sees no GPU "
              "(tf.config.list_physical_devices('GPU') is empty)",
              "tf_version": getattr(tf, "__version__", None)}, EXIT_NO_GPU)
    for g in gpus:
        try:
            tf.config.experimental.set_memory_growth(g, True)
        except Exception:
            pass
    try:
        gpu_name = tf.config.experimental.get_device_details(gpus[0]).get("device_name",
                                                                          gpus[0].name)
    except Exception:
        gpu_name = gpus[0].name

    from tensorflow import keras

    if args.precision == "mixed_float16":
        keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([
        keras.layers.Input(shape=(256, 256, 3)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        # float32 logits keep the softmax stable under mixed precision.
        keras.layers.Dense(10, dtype="float32"),
    ])
    opt = keras.optimizers.SGD(learning_rate=0.01)
    if args.precision == "mixed_float16":
        opt = keras.mixed_precision.LossScaleOptimizer(opt)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    mixed = args.precision == "mixed_float16"

    with tf.device("/GPU:0"):
        x = tf.random.uniform((args.batch_size, 256, 256, 3))
        y = tf.random.uniform((args.batch_size,), maxval=10, dtype=tf.int32)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
            scaled = opt.get_scaled_loss(loss) if mixed else loss
        grads = tape.gradient(scaled, model.trainable_variables)
        if mixed:
            grads = opt.get_unscaled_gradients(grads)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    loss = None
    for _ in range(args.warmup):
        loss = step(x, y)
    if loss is not None:
        loss.numpy()  # drain the queue before the clock starts
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step(x, y)
    final_loss = float(loss.numpy())  # synchronise: waits for the last step
    elapsed = time.perf_counter() - t0

    cuda, cudnn = build_info(tf)
    ms = elapsed * 1000.0 / args.steps
    emit({
        "ok": True,
        "gpu": gpu_name,
        "precision": args.precision,
        "batch_size": args.batch_size,
        "steps": args.steps,
        "warmup": args.warmup,
        "ms_per_step": round(ms, 4),
        "images_per_sec": round(args.batch_size * args.steps / elapsed, 2),
        "loss": final_loss,
        "tf_version": tf.__version__,
        "cuda_version": cuda,
        "cudnn_version": cudnn,
    }, 0)


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception as e:  # report, never a bare traceback as the result
        emit({"ok": False, "reason": f"benchmark failed: {type(e).__name__}: {e}"}, 1)
