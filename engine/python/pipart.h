/*
 * pipart.h - the files of a complete pip lock, named before anything changes.
 *
 * A pin `name==version --hash=sha256:H ...` names its file by hash only; the
 * URL and file name come from where pip would look: a direct reference
 * (`name @ URL`), a wheel directory (`--mirror DIR`), or a PEP 503 index
 * page (`<index>/<name>/`, whose links carry `#sha256=`). Only a file whose
 * hash the pin lists is taken (an index page is not trusted beyond that),
 * and the download is verified against that hash like every artifact. The
 * wheels whose tags cannot suit the env's interpreter (Python X.Y from the
 * manifest, the stack's platform) are left out; when that leaves none, every
 * pinned file is kept and pip or the native installer chooses at apply.
 *
 * The file name of each verified hash is kept in the cache beside it
 * (<cache>/names/<sha256>), so an `--offline` run and the pip step find the
 * names again without the index: the step then installs from a directory of
 * links to the verified cache files (pip with --no-index --find-links, or
 * the native installer), never from a second download.
 */
#ifndef TFPROV_PIPART_H
#define TFPROV_PIPART_H

#include <stddef.h>

struct ctx;
struct artset;
struct pip_req;
struct strbuf;

struct pipart_src {
	const char *index_url; /* PEP 503 index (NULL: https://pypi.org/simple/) */
	const char *dir;       /* a directory of wheels (--mirror DIR): used instead */
	const char *pyver;     /* "3.12" of the env's interpreter, NULL when unknown */
	const char *arch;      /* "x86_64" */
};

/*
 * Adds one artifact per pinned file to out (several for a pin only when more
 * than one of its pinned files may suit the env). 0, or TF_E* with *errmsg
 * (caller frees) naming the pin and where it was looked for.
 */
int pipart_resolve(struct ctx *c, const struct pip_req *reqs, size_t n,
                   const struct pipart_src *src, struct artset *out, char **errmsg);

/*
 * Fills `dir` (existing, empty) with a link (or copy) of the verified cache
 * file of each pin, under its file name. 0 with *complete 1 when every pin
 * has one, 0 when some pin has none (nothing to say: pip downloads as
 * before), or TF_E* with *errmsg.
 */
int pipart_wheelhouse(struct ctx *c, const struct pip_req *reqs, size_t n, const char *dir,
                      int *complete, char **errmsg);

/*
 * Marks the wheels out->v[from..] for decode-ahead (artset_mark_python),
 * when the lock is all wheels (an sdist sends the whole lock to pip) and the
 * env at env_path (root-relative; Python X.Y pyver) does not hold that
 * version already: the native installer then takes their trees.
 */
void pipart_mark_predecode(struct ctx *c, struct artset *out, size_t from, const char *env_path,
                           const char *pyver);

#endif
