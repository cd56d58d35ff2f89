/*
 * image_int.h - what the files of `tfprov image build` share: the checks of
 * the base (image_base.c), called by the build (image.c).
 */
#ifndef TFPROV_IMAGE_INT_H
#define TFPROV_IMAGE_INT_H

#include "cli.h"
#include "image.h"
#include "manifest.h"
#include "plan.h"

/* image_base.c */

/* The stack's platform against the base's os/architecture. 0 or TF_EPRECOND (said). */
int check_base(struct ctx *c, const struct manifest *m, const struct oci_image *base,
               const char *ref);
/*
 * The base's glibc against the floor of the pip lock's wheels (the one apply
 * checks the host against, modules/pip.c): a manylinux wheel does not load on
 * an older glibc, and a base without one runs none. 0, TF_EPRECOND (said) or
 * TF_EFAIL.
 */
int check_base_glibc(struct ctx *c, const struct manifest *m, const struct oci_image *base,
                     const char *blobs, const char *ref);
/*
 * The venv venvs->v[i] (root-relative) runs pythons->v[i] (absolute, in the
 * image; "" for none to check): each must be in the base's layers (in
 * blobs), or nothing in that env runs. 0, TF_EPRECOND (said) or TF_EFAIL.
 */
int check_base_interpreters(struct ctx *c, const struct strvec *venvs, const struct strvec *pythons,
                            const struct oci_image *base, const char *blobs, const char *ref);

#endif
