/*
 * fuzz_manifest.c - libFuzzer target for the manifest parser: any bytes are
 * parsed and, when they form a manifest, linted against the real knowledge
 * base. The parser must answer with diagnostics, never crash, hang or leak.
 */
#include "kb.h"
#include "diag.h"
#include "manifest.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

static struct compat *kb;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct diags d = {0};
	struct manifest *m = NULL;
	if (kb == NULL) {
		struct diags kd = {0};
		if (compat_load(compat_default_path(), &kb, &kd) != 0)
			abort(); /* the knowledge base itself must load */
		diags_release(&kd);
	}
	if (manifest_load_buf("fuzz.yaml", (const char *)data, size, &m, &d) == 0)
		compat_lint(kb, m, &d);
	manifest_free(m);
	diags_release(&d);
	return 0;
}
