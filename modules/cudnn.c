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
 * Two stacks with one CUDA version share its prefix (cuda.c). The cuDNN of
 * a stack is merged there only when every stack that merged one into it
 * merged the same; otherwise the planner places it separately and says so
 * (plan.c, plan_resolve_placement), and the choice is recorded in the
 * step's attrs for those who read the stack later (stackinfo.c).
 */
#include "artifact.h"
#include "step_artifacts.h"
#include "error.h"
#include "event.h"

#include <stdlib.h>
#include <string.h>

static enum desire cudnn_desire(struct ctx *c, const struct manifest *m, struct strbuf *canon,
                                struct strbuf *detail, struct strvec *urls)
{
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
	if (m->cudnn.placement_auto)
		strbuf_addf(detail, " (not merged: %s)", m->cudnn.placement_why);
	if (m->cudnn.placement == PLACEMENT_MERGE) {
		struct strvec with = STRVEC_INIT;
		place_sharers(c, "cudnn", m->stack.name.s, prefix, &with, NULL, NULL);
		for (size_t i = 0; i < with.n; i++)
			strbuf_addf(detail, "%s'%s'", i ? ", " : ", shared with stack ", with.v[i]);
		strvec_release(&with);
	}
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
	(void)c;
	if (m->cudnn.redist.set && !m->cudnn.redist.json.sha256.set)
		return step_fail_unpinned(s, m, "cudnn.redist", &m->cudnn.redist);
	return 0;
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

/* prep: the archives, as cudnn_artifacts named them (module.h). */
static int cudnn_apply(struct ctx *c, const struct manifest *m, struct step *s, struct txn *t,
                       struct prepared *prep)
{
	struct staged tree = {0}, merged = {0};
	char *prefix = stack_cudnn_prefix(m);
	char *stage = NULL;
	int rc = 0;
	/* The planner's choice is recorded, so that run, env and verify follow it. */
	free(s->attrs);
	s->attrs = m->cudnn.placement_auto ? xstrdup("{\"placement\": \"separate\"}") : NULL;
	if ((rc = txn_stage_dir(t, prefix, &stage)) != 0)
		goto out;
	if ((rc = artset_fetch_unpack(c, &prep->arts, stage, &tree, s)) != 0)
		goto out;
	if (m->cudnn.placement == PLACEMENT_SEPARATE) {
		/* What it merged or placed elsewhere before goes (or stays with its sharers). */
		if ((rc = txn_remove_outside(t, prefix)) == 0)
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
		/*
		 * Into the CUDA prefix, sharing the files of a stack that merged the
		 * same cuDNN (the planner placed a different one separately); what
		 * this step merged before and no longer wants is released.
		 */
		rc = txn_share_tree(t, stage, prefix, merged.v, merged.n);
	}
	size_t placed = m->cudnn.placement == PLACEMENT_MERGE ? merged.n : tree.n;
	if (rc == 0)
		ev_log(c, EV_INFO, "cudnn: %zu path%s %s %s", placed, plural_s((long long)placed),
		       m->cudnn.placement == PLACEMENT_MERGE ? "merged into" : "in", prefix);
out:
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
