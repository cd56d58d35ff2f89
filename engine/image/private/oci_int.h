/*
 * oci_int.h - what ocilayer.c and oci.c share inside the image room: a blob
 * written in pieces (hashed as it is written into a temporary file of the
 * blob directory, renamed to its digest by blob_close). Code outside
 * engine/image/ does not include this file.
 */
#ifndef TFPROV_OCI_INT_H
#define TFPROV_OCI_INT_H

#include "digest.h"
#include "error.h"
#include "image.h"

struct blob_out {
	int fd;
	char *tmp;
	struct sha256 h;
	int64_t size;
	int err; /* errno of the first failed write */
	/* When set (oci_blob_take): the hex digest and size (-1: any) the bytes
	 * must have, or blob_close removes them (TF_EINTEGRITY). */
	const char *expect;
	int64_t expect_size;
};

/* Opens a new blob in blobdir/sha256. 0, TF_ENOSPC or TF_EIO (why set). */
int blob_open(const char *blobdir, struct blob_out *b, struct why *why);
/* Appends n bytes; a failure is kept in b->err for blob_close. */
void blob_add(struct blob_out *b, const void *data, size_t n);
/*
 * Renames the blob to sha256/<hex> and fills *out; with failed (a TF_E*
 * code of the caller) or a write error, removes it and returns the error;
 * bytes that are not those b->expect names are removed too (TF_EINTEGRITY).
 */
int blob_close(const char *blobdir, struct blob_out *b, int failed, const char *media_type,
               struct oci_desc *out, struct why *why);

#endif
