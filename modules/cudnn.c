/*
 * cudnn.c - the `cudnn` step.
 *
 * placement: merge copies cuDNN's headers and libraries into the CUDA
 * prefix exactly as the setup guide does by hand (include/cudnn*.h,
 * lib/libcudnn*; legacy .tgz archives have cuda/include and cuda/lib64),
 * keeping symlinks as symlinks. placement: separate keeps its own prefix,
 * <prefix>/cudnn/<version>-cuda<cuda>, which the env step adds to
 * LD_LIBRARY_PATH.
 *
 * Two stacks that merge different cuDNN files into one CUDA prefix are a
 * conflict, found before anything changes (precheck).
 */
#include "artifact.h"
#include "error.h"
#include "event.h"

#include <stdlib.h>
#include <string.h>

static enum desire cudnn_desire(struct ctx *c, const struct manifest *m, struct strbuf *canon,
                                struct strbuf *detail, struct strvec *urls)
{
	(void)c;
	if (!m->cudnn.set)
		return DESIRE_NONE;
	char *prefix = stack_cudnn_prefix(m);
	strbuf_addf(canon, "prefix=%s\nplacement=%d\n", prefix, (int)m->cudnn.placement);
	if (m->cudnn.has_artifact) {
		strbuf_addf(canon, "artifact=%s strip=%lld\n", m->cudnn.artifact.sha256.s,
		            (long long)m->cudnn.artifact.strip.v);
		strvec_push(urls, m->cudnn.artifact.url.s);
	}
	if (m->cudnn.redist.set) {
		const char *sha = m->cudnn.redist.json.sha256.set ? m->cudnn.redist.json.sha256.s
		                                                  : "(not pinned yet)";
		strbuf_addf(canon, "redist=%s variant=%s\n", sha,
		            m->cudnn.redist.variant.s ? m->cudnn.redist.variant.s : "");
		strvec_pushf(urls,
		             "%s (sha256 %.12s...), then the archive it pins for variant %s, "
		             "resolved at apply",
		             m->cudnn.redist.json.url.s, sha,
		             m->cudnn.redist.variant.s ? m->cudnn.redist.variant.s : "(none)");
	}
	strbuf_addf(detail, "cuDNN %s, %s %s", m->cudnn.version.s ? m->cudnn.version.s : "?",
	            m->cudnn.placement == PLACEMENT_MERGE ? "merged into" : "separate in", prefix);
	free(prefix);
	return DESIRE_WANTED;
}

/* Only what the guide copies: headers and libraries. */
static int merged_path(const char *p)
{
	return str_starts_with(p, "include/") || str_starts_with(p, "lib/") ||
	       str_starts_with(p, "lib64/") || strcmp(p, "include") == 0 || strcmp(p, "lib") == 0 ||
	       strcmp(p, "lib64") == 0;
}

static int cudnn_precheck(struct ctx *c, const struct manifest *m, struct step *s)
{
	if (m->cudnn.redist.set && !m->cudnn.redist.json.sha256.set)
		return step_fail_unpinned(s, m, "cudnn.redist", &m->cudnn.redist);
	if (m->cudnn.placement != PLACEMENT_MERGE || c->st == NULL)
		return 0;
	char *prefix = stack_cudnn_prefix(m);
	int rc = step_foreign_clash(c, s, "cudnn", m, prefix,
	                            "two stacks cannot share one CUDA prefix yet: give one of "
	                            "them another `prefix:`, or destroy the other stack first");
	free(prefix);
	return rc;
}

static int cudnn_artifacts(struct ctx *c, const struct manifest *m, struct artset *arts,
                           struct step *s)
{
	const char *platform =
	    m->stack.platform == PLATFORM_WINDOWS_X86_64 ? "windows-x86_64" : "linux-x86_64";
	size_t from = arts->n;
	int rc = 0;
	if (m->cudnn.has_artifact)
		artset_add_artifact(arts, &m->cudnn.artifact, 1);
	if (m->cudnn.redist.set)
		rc = artset_add_redist(c, arts, &m->cudnn.redist, platform, s);
	/* Every archive is unpacked by artset_fetch_unpack (decode-ahead may). */
	if (rc == 0)
		artset_mark_unpack(arts, from);
	return rc;
}

static int cudnn_apply(struct ctx *c, const struct manifest *m, struct step *s, struct txn *t)
{
	struct artset arts = {0};
	struct staged tree = {0}, merged = {0};
	char *prefix = stack_cudnn_prefix(m);
	char *stage = NULL;
	int rc = cudnn_artifacts(c, m, &arts, s);
	if (rc != 0)
		goto out;
	/* A repair or an update replaces what this step placed before. */
	if (s->res_id && m->cudnn.placement == PLACEMENT_MERGE && (rc = txn_remove_all(t)) != 0)
		goto out;
	if ((rc = txn_stage_dir(t, prefix, &stage)) != 0)
		goto out;
	if ((rc = artset_fetch_unpack(c, &arts, stage, &tree, s)) != 0)
		goto out;
	if (m->cudnn.placement == PLACEMENT_SEPARATE) {
		rc = txn_put_tree(t, stage, prefix, tree.v, tree.n);
	} else {
		for (size_t i = 0; i < tree.n; i++)
			if (merged_path(tree.v[i].path))
				staged_add(&merged, tree.v[i].path, tree.v[i].type,
				           tree.v[i].sha256, tree.v[i].size, tree.v[i].mode,
				           tree.v[i].link);
		if (merged.n == 0) {
			step_fail(s,
			          "the cuDNN archive has no include/ or lib/ directory: is strip "
			          "right for its layout?");
			rc = TF_EFAIL;
			goto out;
		}
		rc = txn_merge_tree(t, stage, prefix, merged.v, merged.n);
	}
	size_t placed = m->cudnn.placement == PLACEMENT_MERGE ? merged.n : tree.n;
	if (rc == 0)
		ev_log(c, EV_INFO, "cudnn: %zu path%s %s %s", placed, plural_s((long long)placed),
		       m->cudnn.placement == PLACEMENT_MERGE ? "merged into" : "in", prefix);
out:
	artset_release(&arts);
	staged_release(&tree);
	staged_release(&merged);
	free(prefix);
	free(stage);
	return rc;
}

const struct module module_cudnn = {
    .kind = "cudnn",
    .desire = cudnn_desire,
    .precheck = cudnn_precheck,
    .apply = cudnn_apply,
    .artifacts = cudnn_artifacts,
    .depends_on = "cuda",
};
