/*
 * image_inspect.c - `tfprov image inspect IMAGE [OTHER]`: an OCI image's
 * layers (a layout directory or a docker-archive), the step each holds (from
 * the config's history), and which layers, and how many bytes, it shares
 * with OTHER. Reads only; the images are unpacked into a scratch directory
 * that goes at the end.
 */
#include "cli.h"
#include "error.h"
#include "event.h"
#include "fs.h"
#include "image.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The step a layer holds, from the config's history (empty layers skipped). */
static const char *layer_step(const struct oci_image *im, size_t idx)
{
	json_t *h;
	size_t i, k = 0;
	json_array_foreach(json_object_get(im->config, "history"), i, h)
	{
		if (json_is_true(json_object_get(h, "empty_layer")))
			continue;
		if (k++ == idx) {
			const char *s = json_string_value(json_object_get(h, "created_by"));
			return s ? s : "";
		}
	}
	return "";
}

int image_inspect(struct ctx *c, struct opts *o)
{
	struct oci_image im = {0}, other = {0};
	char *scratch = NULL, *tmpl = NULL;
	struct why err = {0};
	int rc = 0, have_other = o->args.n == 3;
	if (o->args.n < 2 || o->args.n > 3) {
		fprintf(stderr, "usage: tfprov image inspect IMAGE [OTHER]\n");
		return TF_EUSAGE;
	}
	tmpl = xstrdup("/tmp/tfprov-inspect-XXXXXX");
	if (mkdtemp(tmpl) == NULL) {
		ev_log(c, EV_ERROR, "cannot create a scratch directory: %s", strerror(errno));
		free(tmpl);
		return TF_EIO;
	}
	scratch = path_join(tmpl, "a");
	mkdir(scratch, 0700);
	rc = oci_image_read(o->args.v[1], scratch, NULL, &im, &err);
	if (rc == 0 && have_other) {
		free(scratch);
		scratch = path_join(tmpl, "b");
		mkdir(scratch, 0700);
		why_clear(&err);
		rc = oci_image_read(o->args.v[2], scratch, NULL, &other, &err);
	}
	if (rc != 0) {
		ev_log(c, EV_ERROR, "%s", why_text(&err));
		goto out;
	}
	json_t *layers = json_array();
	int64_t total = 0, shared_bytes = 0;
	ev_log(c, EV_INFO, "Image %s: manifest %s", o->args.v[1], im.manifest.digest);
	for (size_t i = 0; i < im.nlayers; i++) {
		int shared = 0;
		for (size_t k = 0; have_other && k < other.nlayers; k++)
			shared |= strcmp(im.layers[i].digest, other.layers[k].digest) == 0;
		const char *step = layer_step(&im, i);
		total += im.layers[i].size;
		if (shared)
			shared_bytes += im.layers[i].size;
		ev_log(c, EV_INFO, "  %2zu %-12s %s %12lld%s", i, step[0] ? step : "-",
		       im.layers[i].digest, (long long)im.layers[i].size, shared ? "  shared" : "");
		json_t *l =
		    json_pack("{s:i,s:s,s:s,s:I,s:s}", "index", (int)i, "step", step, "digest",
		              im.layers[i].digest, "size", (json_int_t)im.layers[i].size,
		              "media_type", im.layers[i].media_type);
		if (have_other)
			json_object_set_new(l, "shared", json_boolean(shared));
		json_array_append_new(layers, l);
	}
	ev_log(c, EV_INFO, "%zu layers, %lld bytes%s", im.nlayers, (long long)total, "");
	if (have_other)
		ev_log(c, EV_INFO, "shared with %s: %lld bytes", o->args.v[2],
		       (long long)shared_bytes);
	json_t *j = json_pack("{s:s,s:s,s:o,s:I}", "image", o->args.v[1], "manifest",
	                      im.manifest.digest, "layers", layers, "size", (json_int_t)total);
	json_object_set(j, "config", json_object_get(im.config, "config"));
	if (have_other)
		json_object_set_new(j, "shared_bytes", json_integer(shared_bytes));
	ev_data(c, "image_inspect", j);
	json_decref(j);
out:
	fs_rmtree(tmpl);
	free(tmpl);
	free(scratch);
	why_clear(&err);
	oci_image_release(&im);
	oci_image_release(&other);
	return rc;
}
