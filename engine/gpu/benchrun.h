/*
 * benchrun.h - runs the GPU conv benchmark script (bench/bench_conv.py)
 * in a stack's interpreter with the stack's environment, and reads the one
 * JSON object it prints into a struct bench_result.
 *
 * The script's contract: exit 0 with {"ok": true, ...} on a measurement;
 * exit 3 with {"ok": false, "reason": ...} when TensorFlow sees no GPU (or
 * is missing); anything else is a failure of the benchmark itself.
 * Strings in a result are owned by it; bench_result_release() frees them.
 */
#ifndef TFPROV_BENCHRUN_H
#define TFPROV_BENCHRUN_H

struct ctx;

struct bench_opts {
	const char *python;      /* the env's interpreter */
	const char *script;      /* path of bench_conv.py */
	char *const *envp;       /* the stack's environment (complete) */
	const char *const *args; /* extra script arguments, NULL-terminated; may be NULL */
	double timeout_s;        /* 0: 30 minutes */
};

struct bench_result {
	int ok;          /* a GPU measurement was made */
	int exit_status; /* the script's exit status */
	char *reason;    /* why not ok */
	char *gpu, *precision, *tf_version, *cuda_version, *cudnn_version;
	int batch_size, steps;
	double ms_per_step, images_per_sec;
	char *raw_json; /* the object as printed */
};

/*
 * 0 when the script ran and printed a valid object (check ok: no GPU is
 * ok == 0 with a reason, and the caller maps it to TF_EVERIFY); TF_EFAIL
 * with *errmsg when it could not run or printed no JSON.
 */
int bench_run(struct ctx *c, const struct bench_opts *o, struct bench_result *r, char **errmsg);
void bench_result_release(struct bench_result *r);

#endif
