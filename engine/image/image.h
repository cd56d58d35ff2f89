/*
 * image.h - the image room's public face: OCI images written and read
 * without a daemon (`tfprov image`, cli/image.c).
 *
 * What it keeps:
 *  - A layer is an uncompressed tar written by libarchive from a staged tree:
 *    entries sorted by path, every parent directory present, uid/gid 0 and
 *    no owner names, one mtime for every entry (the caller's epoch), no
 *    atime or ctime, modes masked to 0755 (no set-id, no group/other write),
 *    regular files in full (never a hard link). The same tree therefore gives
 *    the same bytes, whatever the umask, the clock or the order of the
 *    directory on disk, and uncompressed its digest is its diff_id.
 *  - Blobs are written to a temporary file in the blob directory, hashed
 *    while they are written, and renamed to their digest: a blob that is
 *    there is complete.
 *  - JSON documents (config, manifest, index) are written with sorted keys
 *    and no whitespace, so equal content gives an equal digest.
 *
 * Ownership: an oci_image owns every string and JSON value in it;
 * oci_image_release() frees them. oci_desc strings are owned by their array.
 */
#ifndef TFPROV_IMAGE_H
#define TFPROV_IMAGE_H

#include "error.h"
#include "util.h"

#include <jansson.h>
#include <stdint.h>

#define OCI_MT_LAYER      "application/vnd.oci.image.layer.v1.tar"
#define OCI_MT_LAYER_GZIP "application/vnd.oci.image.layer.v1.tar+gzip"
#define OCI_MT_CONFIG     "application/vnd.oci.image.config.v1+json"
#define OCI_MT_MANIFEST   "application/vnd.oci.image.manifest.v1+json"
#define OCI_MT_INDEX      "application/vnd.oci.image.index.v1+json"

/* A content descriptor: "sha256:<hex>", its size and media type. */
struct oci_desc {
	char *media_type;
	char digest[72];
	int64_t size;
};

/* An image as read: its config (owned), its layers (blobs present in blobdir). */
struct oci_image {
	json_t *config;
	struct oci_desc *layers;
	size_t nlayers;
	struct oci_desc manifest; /* the manifest's own descriptor */
	json_t *manifest_json;    /* the manifest (owned) */
};
void oci_image_release(struct oci_image *im);

/*
 * Writes the uncompressed layer of the entries `paths` (relative to the host
 * directory root, any order; their parent directories are added) into
 * blobdir as sha256/<hex> (blobdir/sha256 is created). *out gets the
 * descriptor (digest == diff_id). 0, TF_EIO (why set: the path and the
 * cause, ENOSPC included) or TF_EFAIL (an entry that is neither a file, a
 * directory nor a symlink).
 */
int oci_layer_write(const char *root, char *const *paths, size_t n, int64_t epoch,
                    const char *blobdir, struct oci_desc *out, struct why *why);

/* Writes data as a blob of blobdir (sha256/<hex>); *out its descriptor. 0 or TF_EIO. */
int oci_blob_write(const char *blobdir, const char *media_type, const void *data, size_t len,
                   struct oci_desc *out, struct why *why);

/*
 * Brings the file src into blobdir as the blob digest ("sha256:<hex>") of
 * size bytes (-1: any), never trusting it: its bytes are hashed as they are
 * copied (a temporary file, fsync'ed, renamed to its digest), and bytes
 * that do not match are not kept. link_ok: hashed first, then a hard link
 * when blobdir is on src's filesystem (for a blobdir whose files are never
 * handed out, as the layout a docker archive is written from), else copied.
 * 0, TF_EINTEGRITY (why: what the bytes hash to), TF_ENOSPC or TF_EIO.
 */
int oci_blob_take(const char *src, const char *blobdir, const char *digest, int64_t size,
                  int link_ok, struct why *why);

/*
 * The first entry of the layer blobs layers[0..n) (in blobdir) whose name
 * ("opt/x/libcuda.so.1": no leading '/') match() accepts, as "/opt/x/...",
 * in *found (caller frees; NULL when none). Only headers are read. 0 or
 * TF_EFAIL (a layer that does not read).
 */
int oci_layers_find(const struct oci_desc *layers, size_t n, const char *blobdir,
                    int (*match)(const char *name), char **found, struct why *why);

/* json as the canonical text every document of an image is written in (caller frees). */
char *oci_json_dump(const json_t *json);

/*
 * Reads the image ref names into *out, with its layer blobs (and config)
 * present in blobdir afterwards (linked or copied; blobdir NULL: read in
 * place, for inspect). ref: "oci:DIR[:TAG]" (an OCI image layout),
 * "docker-archive:FILE" (a `docker save` / `podman save` tar), or a plain
 * path, a directory taken as an OCI layout and a file as a docker archive.
 * Other transports ("docker://…") are refused with TF_EUSAGE: a registry
 * reference is reserved for later. scratch: an empty directory this call may
 * fill (a docker archive is unpacked there). Each blob brought into blobdir
 * is hashed against its digest first. 0, TF_EFAIL (it does not exist, or is
 * not an image: why says so), TF_EINTEGRITY (a blob whose bytes do not
 * match its digest) or TF_EIO.
 */
int oci_image_read(const char *ref, const char *scratch, const char *blobdir, struct oci_image *out,
                   struct why *why);

/*
 * Whether each of paths (absolute, in the image) names an entry of the
 * filesystem im's layers make (in blobdir), symlinks followed: found[i] 1 or
 * 0. A later layer's entry with the same name counts as one; whiteouts are
 * not applied. 0 or TF_EFAIL (a layer that does not read).
 */
int oci_image_has_paths(const struct oci_image *im, const char *blobdir, char *const *paths,
                        size_t npaths, int *found, struct why *why);

/*
 * The contents of the first of paths (absolute, in the image; symlinks
 * followed) that names an entry in the filesystem im's layers (in blobdir)
 * make: the last layer's entry of that name, which must be a regular file.
 * At most max bytes are read; *data is NUL-terminated (caller frees), *len
 * its length, *resolved (may be NULL) the name reached ("/lib/..."; caller
 * frees). 0 (*data NULL when none of them names a regular file) or TF_EFAIL
 * (a layer that does not read).
 */
int oci_image_read_file(const struct oci_image *im, const char *blobdir, char *const *paths,
                        size_t npaths, size_t max, char **data, size_t *len, char **resolved,
                        struct why *why);

/*
 * Writes layout (an existing directory holding blobs/sha256/…) as an OCI
 * image layout: the config and manifest blobs, index.json naming the
 * manifest (ref_name in org.opencontainers.image.ref.name when non-NULL),
 * oci-layout. *manifest_out: the manifest's descriptor. 0 or TF_EIO.
 */
int oci_layout_finish(const char *layout, const json_t *config, const struct oci_desc *layers,
                      size_t n, json_t *annotations, const char *ref_name,
                      struct oci_desc *manifest_out, struct why *why);

/*
 * Writes the OCI layout directory layout as the tar `path` that `docker
 * load` (25 and later) and `podman load` take: the layout's files plus the
 * docker manifest.json (Config, RepoTags, Layers), sorted, deterministic as
 * a layer is. 0 or TF_EIO.
 */
int oci_archive_write(const char *layout, const char *path, const char *repo_tag, int64_t epoch,
                      struct why *why);

#endif
