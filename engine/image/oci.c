/*
 * oci.c - images read and written: a base read from an OCI image layout or
 * a docker/podman save archive (its blobs brought into the new image's blob
 * directory), the new image's config, manifest and index written as
 * canonical JSON, and the layout written again as a docker-archive tar.
 *
 * The reference syntax is "TRANSPORT:REST" as skopeo and podman write it
 * (oci:DIR[:TAG], docker-archive:FILE); a plain path is recognised by what
 * it is. A registry transport (docker://) is a reserved word that is
 * refused today, so that it can be added without changing the syntax.
 */
#include "image.h"
#include "oci_int.h"

#include "digest.h"
#include "error.h"
#include "fs.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void oci_image_release(struct oci_image *im)
{
	json_decref(im->config);
	json_decref(im->manifest_json);
	for (size_t i = 0; i < im->nlayers; i++)
		free(im->layers[i].media_type);
	free(im->layers);
	free(im->manifest.media_type);
	memset(im, 0, sizeof(*im));
}

/* "sha256:<64 hex>" -> the hex part, or NULL. */
static const char *digest_hex(const char *d)
{
	if (d == NULL || !str_starts_with(d, "sha256:") || !is_hex64(d + 7))
		return NULL;
	return d + 7;
}

/* Reads blob digest of the layout at dir, checking its sha256, as JSON. */
static int read_json_blob(const char *dir, const char *digest, json_t **out, struct why *why)
{
	const char *hex = digest_hex(digest);
	char *path = NULL, *text = NULL, got[65];
	size_t len = 0;
	int rc = 0;
	if (hex == NULL)
		return why_fail(why, TF_EFAIL, "%s: a descriptor's digest is not sha256:<hex>",
		                dir);
	path = xasprintf("%s/blobs/sha256/%s", dir, hex);
	if (read_file_at(AT_FDCWD, path, 16 << 20, &text, &len) != 0) {
		rc = why_fail(why, TF_EFAIL, "%s: %s", path, strerror(errno));
		goto out;
	}
	sha256_buf(text, len, got);
	if (strcmp(got, hex) != 0) {
		rc = why_fail(why, TF_EINTEGRITY, "%s: content has sha256 %s", path, got);
		goto out;
	}
	json_error_t je;
	*out = json_loadb(text, len, 0, &je);
	if (*out == NULL)
		rc = why_fail(why, TF_EFAIL, "%s: not JSON: %s", path, je.text);
out:
	free(text);
	free(path);
	return rc;
}

/*
 * Brings blob hex of dir (an OCI layout) into blobdir: a hard link, else a
 * copy; first its bytes hashed against the digest that names it, as every
 * input of a build is verified before use (a blob that does not match would
 * go into the new image under a digest it does not have).
 */
static int take_blob(const char *dir, const char *hex, const char *blobdir, struct why *why)
{
	char *src = xasprintf("%s/blobs/sha256/%s", dir, hex);
	char *sub = path_join(blobdir, "sha256");
	char *dst = xasprintf("%s/%s", sub, hex);
	char got[65];
	int64_t size = 0;
	int rc = 0;
	struct stat st;
	if (stat(src, &st) != 0) {
		rc = why_fail(why, TF_EFAIL, "%s: %s (the image names a blob it does not hold)",
		              src, strerror(errno));
		goto out;
	}
	if (sha256_file(src, got, &size) != 0) {
		rc = why_fail(why, TF_EIO, "%s: %s", src, strerror(errno));
		goto out;
	}
	if (strcmp(got, hex) != 0) {
		rc = why_fail(why, TF_EINTEGRITY,
		              "%s: its bytes hash to sha256:%s, not to the digest that names it: "
		              "the image is corrupt",
		              src, got);
		goto out;
	}
	if (mkdirs_at(AT_FDCWD, sub, 0755) != 0 ||
	    (access(dst, F_OK) != 0 && link(src, dst) != 0 && fs_copy_file(src, dst, 0644) != 0))
		rc = why_fail(why, errno == ENOSPC ? TF_ENOSPC : TF_EIO,
		              "%s: cannot copy into %s: %s", src, blobdir, strerror(errno));
out:
	free(dst);
	free(sub);
	free(src);
	return rc;
}

static void desc_from_json(json_t *j, struct oci_desc *d)
{
	const char *mt = json_string_value(json_object_get(j, "mediaType"));
	const char *dg = json_string_value(json_object_get(j, "digest"));
	d->media_type = xstrdup(mt ? mt : "");
	snprintf(d->digest, sizeof(d->digest), "%s", dg ? dg : "");
	d->size = (int64_t)json_integer_value(json_object_get(j, "size"));
}

/* The manifest descriptor of index to read: the one named tag, or the only one. */
static json_t *pick_manifest(const char *dir, json_t *index, const char *tag, struct why *why)
{
	json_t *ms = json_object_get(index, "manifests"), *m, *found = NULL;
	size_t i, n = json_array_size(ms);
	json_array_foreach(ms, i, m)
	{
		const char *ref = json_string_value(json_object_get(
		    json_object_get(m, "annotations"), "org.opencontainers.image.ref.name"));
		if (tag == NULL ? n == 1 : (ref && strcmp(ref, tag) == 0))
			found = m;
	}
	if (found == NULL && n == 0)
		why_fail(why, TF_EFAIL, "%s: the index names no image", dir);
	else if (found == NULL && tag)
		why_fail(why, TF_EFAIL, "%s: no image is tagged %s", dir, tag);
	else if (found == NULL)
		why_fail(why, TF_EFAIL, "%s: the index names %zu images: say which (oci:%s:TAG)",
		         dir, n, dir);
	return found;
}

/* Reads the OCI image layout at dir (tag: the ref name or NULL). */
static int read_layout(const char *dir, const char *tag, const char *blobdir, struct oci_image *out,
                       struct why *why)
{
	char *p = path_join(dir, "index.json");
	json_t *index = NULL, *cur = NULL;
	json_error_t je;
	int rc = 0;
	struct stat st;
	if (stat(dir, &st) != 0) {
		rc = why_fail(why, TF_EFAIL, "%s: %s", dir, strerror(errno));
		goto out;
	}
	index = json_load_file(p, 0, &je);
	if (index == NULL) {
		rc = why_fail(why, TF_EFAIL, "%s is not an OCI image layout (%s: %s)", dir, p,
		              je.text);
		goto out;
	}
	json_t *d = pick_manifest(dir, index, tag, why);
	if (d == NULL) {
		rc = TF_EFAIL;
		goto out;
	}
	/* An index inside the index (a multi-platform image): its linux/amd64 entry. */
	for (int depth = 0; depth < 2; depth++) {
		const char *mt = json_string_value(json_object_get(d, "mediaType"));
		json_decref(cur);
		cur = NULL;
		rc =
		    read_json_blob(dir, json_string_value(json_object_get(d, "digest")), &cur, why);
		if (rc != 0)
			goto out;
		if (mt == NULL || strcmp(mt, OCI_MT_INDEX) != 0)
			break;
		json_t *m, *pick = NULL;
		size_t i;
		json_array_foreach(json_object_get(cur, "manifests"), i, m)
		{
			json_t *pl = json_object_get(m, "platform");
			const char *a = json_string_value(json_object_get(pl, "architecture"));
			if (pick == NULL && a && strcmp(a, "amd64") == 0)
				pick = m;
		}
		if (pick == NULL) {
			rc = why_fail(why, TF_EFAIL, "%s: the image index has no linux/amd64 image",
			              dir);
			goto out;
		}
		d = pick;
	}
	if (json_object_get(cur, "layers") == NULL) {
		rc = why_fail(why, TF_EFAIL, "%s: the manifest has no layers", dir);
		goto out;
	}
	desc_from_json(d, &out->manifest);
	const char *cfg =
	    json_string_value(json_object_get(json_object_get(cur, "config"), "digest"));
	rc = read_json_blob(dir, cfg, &out->config, why);
	if (rc == 0 && blobdir)
		rc = take_blob(dir, digest_hex(cfg), blobdir, why);
	json_t *ls = json_object_get(cur, "layers"), *l;
	size_t i;
	out->layers = xcalloc(json_array_size(ls) + 1, sizeof(*out->layers));
	json_array_foreach(ls, i, l)
	{
		if (rc != 0)
			break;
		desc_from_json(l, &out->layers[out->nlayers++]);
		const char *hex = digest_hex(out->layers[out->nlayers - 1].digest);
		if (hex == NULL) {
			rc = why_fail(why, TF_EFAIL, "%s: layer %zu has no sha256 digest", dir, i);
		} else if (blobdir) {
			rc = take_blob(dir, hex, blobdir, why);
		}
	}
	if (rc == 0) {
		out->manifest_json = cur;
		cur = NULL;
	}
out:
	json_decref(cur);
	json_decref(index);
	free(p);
	return rc;
}

/*
 * Every regular member of the opened docker archive: manifest.json read into
 * *text, every other member streamed into blobs (never held in memory) and
 * named in names (member name -> "sha256:<hex>"). 0 or an error (why).
 */
static int archive_take_members(struct archive *a, const char *file, const char *blobs,
                                json_t *names, char **text, struct why *why)
{
	struct archive_entry *e;
	int rc = 0, r;
	while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		const char *name = archive_entry_pathname(e);
		if (archive_entry_filetype(e) != AE_IFREG)
			continue;
		struct oci_desc d = {0};
		struct blob_out b;
		char buf[1 << 16];
		la_ssize_t k;
		if (strcmp(name, "manifest.json") == 0) {
			struct strbuf sb = STRBUF_INIT;
			while ((k = archive_read_data(a, buf, sizeof(buf))) > 0 &&
			       sb.len < (4u << 20))
				strbuf_add(&sb, buf, (size_t)k);
			free(*text);
			*text = strbuf_detach(&sb);
		} else {
			rc = blob_open(blobs, &b, why);
			if (rc != 0)
				return rc;
			while ((k = archive_read_data(a, buf, sizeof(buf))) > 0)
				blob_add(&b, buf, (size_t)k);
			if (k < 0)
				why_fail(why, TF_EFAIL, "%s: %s: %s", file, name,
				         archive_error_string(a));
			rc = blob_close(blobs, &b, k < 0 ? TF_EFAIL : 0, "", &d, why);
			if (rc == 0)
				json_object_set_new(names, name, json_string(d.digest));
			free(d.media_type);
		}
		if (k < 0 && rc == 0)
			rc = why_fail(why, TF_EFAIL, "%s: %s: %s", file, name,
			              archive_error_string(a));
		if (rc != 0)
			return rc;
	}
	if (r != ARCHIVE_EOF)
		return why_fail(why, TF_EFAIL, "%s is not an image: %s", file,
		                archive_error_string(a));
	return 0;
}

/* The descriptor of layer blob dg: compressed or not, as the bytes say (docker save
 * writes plain tars). */
static json_t *archive_layer_desc(const char *blobs, const char *dg)
{
	char *lp = xasprintf("%s/sha256/%s", blobs, dg + 7);
	unsigned char magic[2] = {0};
	int fd = open(lp, O_RDONLY | O_CLOEXEC);
	struct stat st = {0};
	if (fd >= 0) {
		if (read(fd, magic, 2) != 2)
			magic[0] = 0;
		fstat(fd, &st);
		close(fd);
	}
	free(lp);
	int gz = magic[0] == 0x1f && magic[1] == 0x8b;
	return json_pack("{s:s,s:s,s:I}", "mediaType", gz ? OCI_MT_LAYER_GZIP : OCI_MT_LAYER,
	                 "digest", dg, "size", (json_int_t)st.st_size);
}

/* The OCI manifest of cfg and layers written as a blob, and dir/index.json naming it. */
static int archive_write_index(const char *dir, const char *blobs, json_t *cfg, json_t *layers,
                               struct why *why)
{
	json_t *man = json_pack("{s:i,s:s,s:O,s:O}", "schemaVersion", 2, "mediaType",
	                        OCI_MT_MANIFEST, "config", cfg, "layers", layers);
	struct oci_desc md = {0};
	char *mtext = oci_json_dump(man);
	json_decref(man);
	int rc = oci_blob_write(blobs, OCI_MT_MANIFEST, mtext, strlen(mtext), &md, why);
	free(mtext);
	if (rc == 0) {
		json_t *idx = json_pack("{s:i,s:[{s:s,s:s,s:I}]}", "schemaVersion", 2, "manifests",
		                        "mediaType", OCI_MT_MANIFEST, "digest", md.digest, "size",
		                        (json_int_t)md.size);
		char *itext = oci_json_dump(idx);
		char *ip = path_join(dir, "index.json");
		json_decref(idx);
		if (fs_write_atomic(ip, itext, strlen(itext), 0644, 0) != 0)
			rc = why_fail(why, TF_EIO, "%s: cannot write", ip);
		free(ip);
		free(itext);
	}
	free(md.media_type);
	return rc;
}

/*
 * Unpacks the docker archive file into scratch/archive as an OCI layout
 * (blobs/sha256/<hex> for every member, hashed as it is written) and writes
 * scratch/archive/index.json naming the manifest its manifest.json
 * describes; the archive then reads as a layout.
 */
static int unpack_docker_archive(const char *file, const char *scratch, struct why *why)
{
	struct archive *a = archive_read_new();
	char *dir = path_join(scratch, "archive"), *blobs = path_join(dir, "blobs");
	json_t *names = json_object(), *dman = NULL, *layers = json_array(), *cfg = NULL;
	char *text = NULL;
	int rc = 0;
	archive_read_support_format_tar(a);
	archive_read_support_filter_all(a);
	if (archive_read_open_filename(a, file, 1 << 16) != ARCHIVE_OK) {
		rc = why_fail(why, TF_EFAIL, "%s is not an image: %s", file,
		              archive_error_string(a));
		goto out;
	}
	rc = archive_take_members(a, file, blobs, names, &text, why);
	if (rc != 0)
		goto out;
	json_error_t je;
	dman = text ? json_loads(text, 0, &je) : NULL;
	json_t *m0 = json_array_get(dman, 0);
	const char *cname = json_string_value(json_object_get(m0, "Config"));
	const char *cdig = cname ? json_string_value(json_object_get(names, cname)) : NULL;
	if (cdig == NULL) {
		rc = why_fail(why, TF_EFAIL, "%s is not an image: no manifest.json naming a config",
		              file);
		goto out;
	}
	json_t *l;
	size_t i;
	json_array_foreach(json_object_get(m0, "Layers"), i, l)
	{
		const char *ln = json_string_value(l);
		const char *dg = ln ? json_string_value(json_object_get(names, ln)) : NULL;
		if (dg == NULL) {
			rc = why_fail(why, TF_EFAIL,
			              "%s: manifest.json names a layer it does not hold (%s)", file,
			              ln ? ln : "?");
			goto out;
		}
		json_array_append_new(layers, archive_layer_desc(blobs, dg));
	}
	char *cp = xasprintf("%s/sha256/%s", blobs, cdig + 7);
	struct stat cst = {0};
	stat(cp, &cst);
	free(cp);
	cfg = json_pack("{s:s,s:s,s:I}", "mediaType", OCI_MT_CONFIG, "digest", cdig, "size",
	                (json_int_t)cst.st_size);
	rc = archive_write_index(dir, blobs, cfg, layers, why);
out:
	json_decref(cfg);
	json_decref(layers);
	json_decref(dman);
	json_decref(names);
	free(text);
	archive_read_free(a);
	free(blobs);
	free(dir);
	return rc;
}

int oci_image_read(const char *ref, const char *scratch, const char *blobdir, struct oci_image *out,
                   struct why *why)
{
	char *path = NULL, *tag = NULL;
	int rc = 0, archive = -1;
	struct stat st;
	memset(out, 0, sizeof(*out));
	if (str_starts_with(ref, "oci:")) {
		path = xstrdup(ref + 4);
		char *colon = strrchr(path, ':');
		if (colon && strchr(colon, '/') == NULL) {
			*colon = '\0';
			tag = colon + 1;
		}
		archive = 0;
	} else if (str_starts_with(ref, "docker-archive:")) {
		path = xstrdup(ref + 15);
		archive = 1;
	} else if (strstr(ref, "://") != NULL || str_starts_with(ref, "docker:") ||
	           str_starts_with(ref, "containers-storage:")) {
		return why_fail(why, TF_EUSAGE,
		                "%s: only local images are read (oci:DIR[:TAG], "
		                "docker-archive:FILE, or a path); registries are not supported yet",
		                ref);
	} else {
		path = xstrdup(ref);
	}
	if (stat(path, &st) != 0) {
		rc = why_fail(why, TF_EFAIL, "%s: %s", path, strerror(errno));
		goto out;
	}
	if (archive < 0)
		archive = !S_ISDIR(st.st_mode);
	if (archive) {
		rc = unpack_docker_archive(path, scratch, why);
		if (rc == 0) {
			char *dir = path_join(scratch, "archive");
			rc = read_layout(dir, NULL, blobdir, out, why);
			free(dir);
		}
	} else {
		rc = read_layout(path, tag, blobdir, out, why);
	}
out:
	if (rc != 0)
		oci_image_release(out);
	free(path);
	return why_code(why, rc);
}

int oci_layout_finish(const char *layout, const json_t *config, const struct oci_desc *layers,
                      size_t n, json_t *annotations, const char *ref_name,
                      struct oci_desc *manifest_out, struct why *why)
{
	char *blobs = path_join(layout, "blobs");
	char *text = oci_json_dump(config), *p = NULL;
	struct oci_desc cd = {0};
	json_t *ls = json_array(), *man = NULL, *idx = NULL, *mdesc = NULL;
	int rc = oci_blob_write(blobs, OCI_MT_CONFIG, text, strlen(text), &cd, why);
	free(text);
	text = NULL;
	if (rc != 0)
		goto out;
	for (size_t i = 0; i < n; i++)
		json_array_append_new(
		    ls, json_pack("{s:s,s:s,s:I}", "mediaType", layers[i].media_type, "digest",
		                  layers[i].digest, "size", (json_int_t)layers[i].size));
	man = json_pack("{s:i,s:s,s:{s:s,s:s,s:I},s:O}", "schemaVersion", 2, "mediaType",
	                OCI_MT_MANIFEST, "config", "mediaType", OCI_MT_CONFIG, "digest", cd.digest,
	                "size", (json_int_t)cd.size, "layers", ls);
	if (annotations)
		json_object_set(man, "annotations", annotations);
	text = oci_json_dump(man);
	rc = oci_blob_write(blobs, OCI_MT_MANIFEST, text, strlen(text), manifest_out, why);
	if (rc != 0)
		goto out;
	mdesc = json_pack("{s:s,s:s,s:I}", "mediaType", OCI_MT_MANIFEST, "digest",
	                  manifest_out->digest, "size", (json_int_t)manifest_out->size);
	if (ref_name)
		json_object_set_new(
		    mdesc, "annotations",
		    json_pack("{s:s}", "org.opencontainers.image.ref.name", ref_name));
	idx = json_pack("{s:i,s:s,s:[O]}", "schemaVersion", 2, "mediaType", OCI_MT_INDEX,
	                "manifests", mdesc);
	free(text);
	text = oci_json_dump(idx);
	p = path_join(layout, "index.json");
	if (fs_write_atomic(p, text, strlen(text), 0644, 0) != 0) {
		rc = why_fail(why, TF_EIO, "%s: cannot write", p);
		goto out;
	}
	free(p);
	p = path_join(layout, "oci-layout");
	static const char ver[] = "{\"imageLayoutVersion\":\"1.0.0\"}";
	if (fs_write_atomic(p, ver, strlen(ver), 0644, 0) != 0)
		rc = why_fail(why, TF_EIO, "%s: cannot write", p);
out:
	free(cd.media_type);
	json_decref(mdesc);
	json_decref(idx);
	json_decref(man);
	json_decref(ls);
	free(text);
	free(p);
	free(blobs);
	return why_code(why, rc);
}

struct collect {
	struct strvec *paths;
};

static int collect_cb(void *ud, const char *rel, const char *host, const struct stat *st)
{
	(void)host;
	struct collect *c = ud;
	if (!S_ISDIR(st->st_mode))
		strvec_push(c->paths, rel);
	return 0;
}

int oci_archive_write(const char *layout, const char *path, const char *repo_tag, int64_t epoch,
                      struct why *why)
{
	struct strvec paths = STRVEC_INIT;
	struct collect cc = {&paths};
	json_t *index = NULL, *man = NULL, *dm = NULL;
	char *mp = NULL, *text = NULL, *ip = path_join(layout, "index.json");
	struct oci_desc d = {0};
	int rc = 0;
	json_error_t je;
	index = json_load_file(ip, 0, &je);
	const char *mdig = json_string_value(
	    json_object_get(json_array_get(json_object_get(index, "manifests"), 0), "digest"));
	rc = mdig ? read_json_blob(layout, mdig, &man, why) : TF_EFAIL;
	if (rc != 0) {
		why_first(why, rc, "%s: no manifest to archive", layout);
		goto out;
	}
	/* docker's manifest.json: paths of the config and layers inside the archive. */
	json_t *ls = json_array(), *l;
	size_t i;
	json_array_foreach(json_object_get(man, "layers"), i, l) json_array_append_new(
	    ls,
	    json_sprintf("blobs/sha256/%s", json_string_value(json_object_get(l, "digest")) + 7));
	const char *cdig =
	    json_string_value(json_object_get(json_object_get(man, "config"), "digest"));
	dm = json_pack("[{s:o,s:[s],s:o}]", "Config",
	               json_sprintf("blobs/sha256/%s", cdig ? cdig + 7 : ""), "RepoTags",
	               repo_tag ? repo_tag : "tfprov:latest", "Layers", ls);
	text = oci_json_dump(dm);
	mp = path_join(layout, "manifest.json");
	if (fs_write_atomic(mp, text, strlen(text), 0644, 0) != 0) {
		rc = why_fail(why, TF_EIO, "%s: cannot write", mp);
		goto out;
	}
	rc = fs_walk(layout, collect_cb, &cc);
	if (rc != 0) {
		rc = why_fail(why, TF_EIO, "%s: %s", layout, strerror(-rc));
		goto out;
	}
	/* The archive is one blob-like file: written beside path, renamed by the caller. */
	char *dir = xstrdup(path), *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	else
		strcpy(dir, ".");
	char *tmpdir = xasprintf("%s/.tfprov-archive-XXXXXX", dir);
	if (mkdtemp(tmpdir) == NULL) {
		rc = why_fail(why, errno == ENOSPC ? TF_ENOSPC : TF_EIO, "%s: %s", dir,
		              strerror(errno));
	} else {
		rc = oci_layer_write(layout, paths.v, paths.n, epoch, tmpdir, &d, why);
		if (rc == 0) {
			char *blob = xasprintf("%s/sha256/%s", tmpdir, d.digest + 7);
			if (rename(blob, path) != 0)
				rc = why_fail(why, TF_EIO, "%s: %s", path, strerror(errno));
			free(blob);
		}
		fs_rmtree(tmpdir);
	}
	free(tmpdir);
	free(dir);
	unlink(mp);
out:
	free(d.media_type);
	json_decref(dm);
	json_decref(man);
	json_decref(index);
	strvec_release(&paths);
	free(text);
	free(mp);
	free(ip);
	return why_code(why, rc);
}

/* One entry of a base's merged filesystem: its name, and a symlink's target. */
struct fs_entry {
	char *name;
	char *link; /* NULL: not a symlink */
};

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct fs_entry *)a)->name, ((const struct fs_entry *)b)->name);
}

static const struct fs_entry *find_entry(const struct fs_entry *v, size_t n, const char *name)
{
	struct fs_entry key = {(char *)name, NULL};
	return n ? bsearch(&key, v, n, sizeof(*v), cmp_entry) : NULL;
}

/*
 * path resolved in the base's filesystem, following symlinks (a merged
 * /usr's /bin -> usr/bin too): the name of the entry it reaches (no leading
 * '/'; caller frees), or NULL when it names none.
 */
static char *resolve_in(const struct fs_entry *v, size_t n, const char *path, int depth)
{
	char *cur = xstrdup("");
	const char *p = path;
	int found = depth <= 16;
	while (*p == '/')
		p++;
	while (found && *p) {
		size_t l = strcspn(p, "/");
		if ((l == 1 && p[0] == '.') || (l == 2 && p[0] == '.' && p[1] == '.')) {
			/* "." stays, ".." goes up (not above the root) */
			char *slash = strrchr(cur, '/');
			if (l == 2)
				*(slash ? slash : cur) = '\0';
			p += l;
			while (*p == '/')
				p++;
			continue;
		}
		char *next = xasprintf("%s%s%.*s", cur, cur[0] ? "/" : "", (int)l, p);
		p += l;
		while (*p == '/')
			p++;
		const struct fs_entry *e = find_entry(v, n, next);
		free(cur);
		cur = next; /* owned by cur from here on */
		if (e == NULL) {
			/* A parent a layer does not list is a plain directory (tar needs none). */
			found = *p != '\0';
		} else if (e->link) {
			/* cur's parent + the link, then what is left of path. */
			char *slash = strrchr(cur, '/');
			if (slash)
				*slash = '\0';
			else
				cur[0] = '\0';
			char *target = e->link[0] == '/' ? xasprintf("%s/%s", e->link, p)
			                                 : xasprintf("/%s/%s/%s", cur, e->link, p);
			free(cur);
			cur = resolve_in(v, n, target, depth + 1);
			free(target);
			return cur;
		}
	}
	if (!found) {
		free(cur);
		return NULL;
	}
	return cur;
}

/* Opens the tar blob of layer i for reading. 0 or TF_EFAIL (why set). */
static int open_layer(const struct oci_image *im, const char *blobdir, size_t i,
                      struct archive **out, struct why *why)
{
	char *f = xasprintf("%s/sha256/%s", blobdir, im->layers[i].digest + 7);
	struct archive *a = archive_read_new();
	int rc = 0;
	archive_read_support_format_tar(a);
	archive_read_support_filter_all(a);
	if (archive_read_open_filename(a, f, 1 << 16) != ARCHIVE_OK) {
		/* Named by its digest: f is in the build's temporary directory. */
		why_fail(why, TF_EFAIL, "layer %s: %s", im->layers[i].digest,
		         archive_error_string(a));
		archive_read_free(a);
		a = NULL;
		rc = TF_EFAIL;
	}
	free(f);
	*out = a;
	return rc;
}

/*
 * The next header of a layer: ARCHIVE_OK, ARCHIVE_EOF or a failure. A warning
 * is an entry read whole: a PAX name that does not convert to the C locale
 * (a Debian root holds UTF-8 file names) is one, its bytes kept as they are.
 */
static int next_header(struct archive *a, struct archive_entry **e)
{
	int r = archive_read_next_header(a, e);
	return r == ARCHIVE_WARN ? ARCHIVE_OK : r;
}

/* An entry's name without "./", leading or trailing '/' (caller frees); NULL for the root. */
static char *entry_name(struct archive_entry *e)
{
	const char *name = archive_entry_pathname(e);
	if (name == NULL)
		name = archive_entry_pathname_utf8(e);
	if (name == NULL)
		return NULL;
	while (name[0] == '.' && name[1] == '/')
		name += 2;
	while (name[0] == '/')
		name++;
	size_t l = strlen(name);
	while (l > 0 && name[l - 1] == '/')
		l--;
	return l ? xstrndup(name, l) : NULL;
}

static void entries_free(struct fs_entry *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].name);
		free(v[i].link);
	}
	free(v);
}

/* Every entry of every layer, sorted by name. 0 or TF_EFAIL (a layer that does not read). */
static int load_entries(const struct oci_image *im, const char *blobdir, struct fs_entry **out,
                        size_t *nout, struct why *why)
{
	struct fs_entry *v = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < im->nlayers; i++) {
		struct archive *a = NULL;
		struct archive_entry *e;
		int r = ARCHIVE_EOF;
		rc = open_layer(im, blobdir, i, &a, why);
		while (rc == 0 && (r = next_header(a, &e)) == ARCHIVE_OK) {
			char *name = entry_name(e);
			if (name == NULL)
				continue;
			if (n == cap) {
				cap = cap ? 2 * cap : 4096;
				v = xrealloc(v, cap * sizeof(*v));
			}
			const char *ln = NULL;
			if (archive_entry_filetype(e) == AE_IFLNK) {
				ln = archive_entry_symlink(e);
				if (ln == NULL)
					ln = archive_entry_symlink_utf8(e);
				if (ln == NULL)
					ln = "";
			}
			/* Whiteouts are kept as plain names: a base rarely deletes its interpreter. */
			v[n++] = (struct fs_entry){name, ln ? xstrdup(ln) : NULL};
		}
		if (rc == 0 && r != ARCHIVE_EOF)
			rc = why_fail(why, TF_EFAIL, "layer %s: %s", im->layers[i].digest,
			              archive_error_string(a));
		if (a)
			archive_read_free(a);
	}
	if (n)
		qsort(v, n, sizeof(*v), cmp_entry);
	*out = v;
	*nout = n;
	return rc;
}

int oci_layers_find(const struct oci_desc *layers, size_t n, const char *blobdir,
                    int (*match)(const char *name), char **found, struct why *why)
{
	struct oci_image im = {.layers = (struct oci_desc *)layers, .nlayers = n};
	int rc = 0;
	*found = NULL;
	for (size_t i = 0; rc == 0 && *found == NULL && i < n; i++) {
		struct archive *a = NULL;
		struct archive_entry *e;
		int r = ARCHIVE_EOF;
		rc = open_layer(&im, blobdir, i, &a, why);
		while (rc == 0 && *found == NULL && (r = next_header(a, &e)) == ARCHIVE_OK) {
			char *name = entry_name(e);
			if (name && match(name))
				*found = xasprintf("/%s", name);
			free(name);
		}
		if (rc == 0 && *found == NULL && r != ARCHIVE_EOF)
			rc = why_fail(why, TF_EFAIL, "layer %s: %s", layers[i].digest,
			              archive_error_string(a));
		if (a)
			archive_read_free(a);
	}
	return rc;
}

int oci_image_has_paths(const struct oci_image *im, const char *blobdir, char *const *paths,
                        size_t npaths, int *found, struct why *why)
{
	struct fs_entry *v = NULL;
	size_t n = 0;
	int rc = load_entries(im, blobdir, &v, &n, why);
	for (size_t i = 0; rc == 0 && i < npaths; i++) {
		char *r = resolve_in(v, n, paths[i], 0);
		found[i] = r != NULL;
		free(r);
	}
	entries_free(v, n);
	return why_code(why, rc);
}

int oci_image_read_file(const struct oci_image *im, const char *blobdir, char *const *paths,
                        size_t npaths, size_t max, char **data, size_t *len, char **resolved,
                        struct why *why)
{
	struct fs_entry *v = NULL;
	size_t n = 0;
	char *name = NULL;
	int rc = load_entries(im, blobdir, &v, &n, why);
	*data = NULL;
	*len = 0;
	if (resolved)
		*resolved = NULL;
	for (size_t i = 0; rc == 0 && name == NULL && i < npaths; i++)
		name = resolve_in(v, n, paths[i], 0);
	/* The last layer that holds the name has the file the image shows. */
	for (size_t i = im->nlayers; rc == 0 && name && *data == NULL && i-- > 0;) {
		struct archive *a = NULL;
		struct archive_entry *e;
		int r = ARCHIVE_EOF, hit = 0;
		rc = open_layer(im, blobdir, i, &a, why);
		while (rc == 0 && !hit && (r = next_header(a, &e)) == ARCHIVE_OK) {
			char *en = entry_name(e);
			hit = en && strcmp(en, name) == 0;
			free(en);
		}
		if (rc == 0 && hit && archive_entry_filetype(e) != AE_IFREG) {
			i = 0; /* a directory or a device: no contents to read */
		} else if (rc == 0 && hit) {
			size_t want = (size_t)archive_entry_size(e) < max
			                  ? (size_t)archive_entry_size(e)
			                  : max;
			char *buf = xmalloc(want + 1);
			la_ssize_t got = want ? archive_read_data(a, buf, want) : 0;
			if (got < 0) {
				why_fail(why, TF_EFAIL, "layer %s: /%s: %s", im->layers[i].digest,
				         name, archive_error_string(a));
				free(buf);
				rc = TF_EFAIL;
			} else {
				buf[got] = '\0';
				*data = buf;
				*len = (size_t)got;
			}
		} else if (rc == 0 && r != ARCHIVE_EOF) {
			rc = why_fail(why, TF_EFAIL, "layer %s: %s", im->layers[i].digest,
			              archive_error_string(a));
		}
		if (a)
			archive_read_free(a);
	}
	if (rc == 0 && *data && resolved)
		*resolved = xasprintf("/%s", name);
	free(name);
	entries_free(v, n);
	return why_code(why, rc);
}
