/* error.c - messages and exit codes for the error vocabulary in error.h. */
#include "error.h"
#include "util.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <stdlib.h>
#include <stdio.h>
#include <stdarg.h>

volatile int tf_interrupted;

#define TF_ERR_MSG(name, exit, msg) msg,
static const char *const messages[] = {TF_ERRORS(TF_ERR_MSG)};
#undef TF_ERR_MSG
#define TF_ERR_EXIT(name, exit, msg) exit,
static const int exits[] = {TF_ERRORS(TF_ERR_EXIT)};
#undef TF_ERR_EXIT

/* The table index of a TF_E* code, or -1 when err is not one. */
static int err_index(int err)
{
	if (err == 0)
		return 0;
	int i = -err - TF_ERR_BASE;
	return i > 0 && i < TF_ERR__COUNT ? i : -1;
}

const char *tf_strerror(int err)
{
	int i = err_index(err);
	if (i >= 0)
		return messages[i];
	if (err < 0 && -err < TF_ERR_BASE)
		return strerror(-err);
	return "unknown error";
}

int tf_exit_code(int err)
{
	int i = err_index(err);
	return i >= 0 ? exits[i] : TF_EXIT_ERROR;
}

int tf_err_from_errno(int err)
{
	if (err >= 0 || err_index(err) >= 0)
		return err;
	switch (-err) {
	case ENOSPC:
	case EDQUOT:
		return TF_ENOSPC;
	case EINTR:
		return TF_EINTR;
	default:
		return TF_EIO;
	}
}

void tf_fatal(const char *fmt, ...)
{
	char buf[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n > sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	/* No allocation, no stdio: this may run with the heap exhausted. */
	ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
	(void)w;
	abort();
}

int why_vfail(struct why *w, int code, const char *fmt, va_list ap)
{
	if (!w)
		return code;
	char *m = xvasprintf(fmt, ap);
	free(w->msg);
	w->code = code;
	w->msg = m;
	return code;
}

int why_fail(struct why *w, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	why_vfail(w, code, fmt, ap);
	va_end(ap);
	return code;
}

int why_first(struct why *w, int code, const char *fmt, ...)
{
	if (!w || w->code || w->msg)
		return code;
	va_list ap;
	va_start(ap, fmt);
	why_vfail(w, code, fmt, ap);
	va_end(ap);
	return code;
}

int why_vfirst_of(struct why *w, const char *who, int code, const char *fmt, va_list ap)
{
	if (!w || w->code || w->msg)
		return code;
	why_vfail(w, code, fmt, ap);
	why_prefix(w, "%s", who);
	return code;
}

int why_code(struct why *w, int code)
{
	if (w && code && !w->code)
		w->code = code;
	return code;
}

void why_prefix(struct why *w, const char *fmt, ...)
{
	if (!w || (!w->code && !w->msg))
		return;
	va_list ap;
	va_start(ap, fmt);
	char *ctx = xvasprintf(fmt, ap);
	va_end(ap);
	char *m = xasprintf("%s: %s", ctx, why_text(w));
	free(ctx);
	free(w->msg);
	w->msg = m;
}

const char *why_text(const struct why *w)
{
	if (!w)
		return tf_strerror(0);
	return w->msg ? w->msg : tf_strerror(w->code);
}

void why_move(struct why *dst, struct why *src)
{
	if (!src)
		return;
	if (!dst) {
		why_clear(src);
		return;
	}
	free(dst->msg);
	*dst = *src;
	src->code = 0;
	src->msg = NULL;
}

void why_clear(struct why *w)
{
	if (!w)
		return;
	free(w->msg);
	w->code = 0;
	w->msg = NULL;
}
