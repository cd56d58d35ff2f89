/*
 * benchrun.c - run bench_conv.py and parse its JSON (see gpu.h).
 *
 * The script prints exactly one JSON object on stdout, but TensorFlow and
 * CUDA write banners to both streams, so the parser takes the last line of
 * stdout that parses as a JSON object rather than the whole stream.
 */
#include "gpu.h"

#include "ctx.h"
#include "error.h"
#include "event.h"
#include "spawn.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

void bench_result_release(struct bench_result *r)
{
	free(r->reason);
	free(r->gpu);
	free(r->precision);
	free(r->tf_version);
	free(r->cuda_version);
	free(r->cudnn_version);
	free(r->raw_json);
	memset(r, 0, sizeof(*r));
}

static char *jstr(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	if (json_is_string(v))
		return xstrdup(json_string_value(v));
	if (json_is_number(v))
		return xasprintf("%g", json_number_value(v));
	return NULL;
}

/* The last line of out that is a JSON object; NULL if none. */
static json_t *last_json_object(const char *out)
{
	json_t *found = NULL;
	char *copy = xstrdup(out ? out : ""), *save = NULL;
	for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		while (*l == ' ' || *l == '\t')
			l++;
		if (*l != '{')
			continue;
		json_t *o = json_loads(l, 0, NULL);
		if (json_is_object(o)) {
			json_decref(found);
			found = o;
		} else {
			json_decref(o);
		}
	}
	free(copy);
	return found;
}

int bench_run(struct ctx *c, const struct bench_opts *o, struct bench_result *r, struct why *why)
{
	struct strvec argv = STRVEC_INIT;
	struct spawn_result sr = {0};
	json_t *j = NULL;
	int rc;

	strvec_push(&argv, o->python);
	strvec_push(&argv, o->script);
	for (size_t i = 0; o->args && o->args[i]; i++)
		strvec_push(&argv, o->args[i]);
	struct spawn_opts so = {
	    .argv = argv.v,
	    .envp = o->envp,
	    .timeout_s = o->timeout_s > 0 ? o->timeout_s : 1800,
	    .flags = SPAWN_KILL_ON_INTR,
	    .max_output = 1u << 20,
	};
	if (c != NULL)
		ev_log(c, EV_DEBUG, "bench: %s %s", o->python, o->script);
	rc = spawn_run(&so, &sr);
	if (rc != 0) {
		why_fail(why, rc, "benchmark: %s", why_text(&sr.why));
		goto out;
	}
	r->exit_status = sr.status;
	if (sr.timed_out) {
		rc = why_fail(why, TF_EFAIL, "benchmark timed out after %.0f s", sr.wall_s);
		goto out;
	}
	j = last_json_object(sr.out.buf);
	if (j == NULL) {
		rc = why_fail(why, TF_EFAIL, "benchmark printed no JSON result (exit %d): %s",
		              sr.status, sr.err.buf ? sr.err.buf : "");
		goto out;
	}
	r->raw_json = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	r->ok = json_is_true(json_object_get(j, "ok")) && sr.status == 0;
	r->reason = jstr(j, "reason");
	if (!r->ok && r->reason == NULL)
		r->reason = xasprintf("benchmark failed (exit %d)", sr.status);
	r->gpu = jstr(j, "gpu");
	r->precision = jstr(j, "precision");
	r->tf_version = jstr(j, "tf_version");
	r->cuda_version = jstr(j, "cuda_version");
	r->cudnn_version = jstr(j, "cudnn_version");
	r->batch_size = (int)json_integer_value(json_object_get(j, "batch_size"));
	r->steps = (int)json_integer_value(json_object_get(j, "steps"));
	r->ms_per_step = json_number_value(json_object_get(j, "ms_per_step"));
	r->images_per_sec = json_number_value(json_object_get(j, "images_per_sec"));
out:
	json_decref(j);
	spawn_result_release(&sr);
	strvec_release(&argv);
	return rc;
}
