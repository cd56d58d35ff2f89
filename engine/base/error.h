/*
 * error.h - the one error vocabulary of tfprov.
 *
 * Functions return int: 0 on success, a negative TF_E* code on failure.
 * Low-level helpers may return -errno; tf_err_from_errno() converts at the
 * boundary where a caller needs one of tfprov's codes (it is the one errno
 * mapper). Never -1, never a positive status: "changed" or "held" is an
 * out-parameter or a result enum, "absent" an out-parameter or -ENOENT. A
 * function whose result is a value (a count, an index, a yes/no predicate)
 * returns it as a non-negative int and still fails with a negative code.
 * TF_ECHANGES is the one code that is not a failure: a command found changes
 * pending (plan --detailed-exitcode, status, verify's drift), exit 2.
 *
 * The words of a failure travel with its code in one carrier, struct why
 * (below). A function that can say more than its code takes `struct why *why`
 * as its last argument and, when it fails, leaves its code there and its
 * words when it has some (why_fail; a function whose failure may come from a
 * helper without words ends with `return why_code(why, rc)`). An object that
 * outlives the call and keeps a failure holds one as a member (a txn, a step,
 * a fetch item, a spawn result, a decoder, a wheel being installed). A
 * manifest finding is a diagnostic (struct diags); a parser's reason
 * (minisign's, pep508's) comes back in its why like any other failure's, and
 * its caller says what was being read with why_prefix; state_errmsg() is
 * SQLite's last words, read by the store's caller. Whoever decides the run
 * fails turns the carrier into one event: a step's failure its EV_STEP_DONE,
 * one no step owns is handed back (plan_apply, place_open_state) and said by
 * the front end; the library never logs at EV_ERROR
 * (test_the_library_logs_no_error). No `char **errmsg`, no static reason in
 * a `const char **why`, no `err ? err : tf_strerror(rc)`:
 * test_layout.py::test_one_message_carrier fails on any of them.
 *
 * tf_exit_code() maps an error to the process exit code documented in
 * README.md ("Exit codes"); that mapping is a public contract, and main()
 * reaches exit codes through it alone.
 */
#ifndef TFPROV_ERROR_H
#define TFPROV_ERROR_H

#include <stdarg.h>

/* Process exit codes: stable, documented, tested. */
enum tf_exit {
	TF_EXIT_OK = 0,
	TF_EXIT_ERROR = 1,
	TF_EXIT_CHANGES = 2,
	TF_EXIT_MANIFEST = 3,
	TF_EXIT_LOCKED = 4,
	TF_EXIT_INTEGRITY = 5,
	TF_EXIT_PRECONDITION = 6,
	TF_EXIT_REBOOT = 7,
	TF_EXIT_VERIFY = 8,
	TF_EXIT_USAGE = 64,
	TF_EXIT_INTERRUPTED = 130,
};

/* X-macro: name, exit code, message. */
#define TF_ERRORS(X)                                                                               \
	X(TF_OK, TF_EXIT_OK, "success")                                                            \
	X(TF_EFAIL, TF_EXIT_ERROR, "operation failed")                                             \
	X(TF_EIO, TF_EXIT_ERROR, "input/output error")                                             \
	X(TF_ENOSPC, TF_EXIT_ERROR, "no space left on device")                                     \
	X(TF_EMANIFEST, TF_EXIT_MANIFEST, "manifest is invalid")                                   \
	X(TF_ELOCKED, TF_EXIT_LOCKED, "state is locked by another run")                            \
	X(TF_EINTEGRITY, TF_EXIT_INTEGRITY, "integrity check failed")                              \
	X(TF_EUNSAFE, TF_EXIT_INTEGRITY, "archive contains an unsafe entry")                       \
	X(TF_EPRECOND, TF_EXIT_PRECONDITION, "precondition failed")                                \
	X(TF_EREBOOT, TF_EXIT_REBOOT, "applied; reboot required")                                  \
	X(TF_EVERIFY, TF_EXIT_VERIFY, "verification failed")                                       \
	X(TF_EUSAGE, TF_EXIT_USAGE, "usage error")                                                 \
	X(TF_EINTR, TF_EXIT_INTERRUPTED, "interrupted")                                            \
	X(TF_ECONFLICT, TF_EXIT_ERROR, "file conflict")                                            \
	X(TF_ENOTIMPL, TF_EXIT_ERROR, "not implemented yet")                                       \
	X(TF_ESTATE, TF_EXIT_ERROR, "state database error")                                        \
	X(TF_ENETWORK, TF_EXIT_ERROR, "download failed")                                           \
	X(TF_EOFFLINE, TF_EXIT_ERROR, "not available offline")                                     \
	X(TF_ECHANGES, TF_EXIT_CHANGES, "changes pending")

#define TF_ERR_ENUM(name, exit, msg) name##_IDX,
enum tf_err_idx { TF_ERRORS(TF_ERR_ENUM) TF_ERR__COUNT };
#undef TF_ERR_ENUM

/*
 * Error codes lie outside errno's range so that a helper's -errno can never
 * be mistaken for one of them (apk-tools starts its codes at 1024 for the same
 * reason): TF_OK == 0, TF_EFAIL == -(TF_ERR_BASE + 1), and so on. A -errno
 * that reaches tf_strerror() or tf_exit_code() is reported as the system
 * error it is, with exit code 1.
 */
#define TF_ERR_BASE 1024
#define TF_ERR_DEF(name, exit, msg)                                                                \
	static const int name = name##_IDX == 0 ? 0 : -(TF_ERR_BASE + (int)name##_IDX);
TF_ERRORS(TF_ERR_DEF)
#undef TF_ERR_DEF

const char *tf_strerror(int err);
/* Maps a -errno to the closest TF_E* (ENOSPC -> TF_ENOSPC, EINTR -> TF_EINTR,
 * anything else -> TF_EIO); a TF_E* code or 0 is returned unchanged. */
int tf_err_from_errno(int err);
int tf_exit_code(int err);
/*
 * What went wrong, in words: the one carrier of a failure's message. code is
 * the TF_E* (or -errno) of the failure, 0 while none was recorded; msg, owned,
 * says it for a reader, NULL when tf_strerror(code) says it all. A caller
 * declares `struct why w = {0};`, passes &w (or NULL when it does not want the
 * words) and releases it with why_clear. Every function below accepts a NULL w.
 */
struct why {
	int code;
	char *msg;
};

/* Records code and the formatted words, replacing what w held; returns code:
 * `return why_fail(why, TF_EIO, "cannot create %s: %s", p, strerror(errno));` */
int why_fail(struct why *w, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int why_vfail(struct why *w, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* The first failure of work that goes on (a decoder, a wheel install) and
 * reports at its end: as why_fail when w holds no failure yet, else nothing.
 * Returns code either way. */
int why_first(struct why *w, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* why_first's, the words prefixed with "<who>: " (the file a writer or an
 * installer works on), from a va_list. Returns code. */
int why_vfirst_of(struct why *w, const char *who, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
/* The code of a failure, when w holds no code yet: what a callee that failed
 * through a helper with no words returned, or the code of a step whose words
 * step_fail gave. The words, if any, stay. Returns code; 0 records nothing. */
int why_code(struct why *w, int code);
/* Puts "<ctx>: " before the words (before tf_strerror(code) when there were
 * none). Nothing when w holds no failure. */
void why_prefix(struct why *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The words: msg, else tf_strerror(code). Borrowed from w. */
const char *why_text(const struct why *w);
/* Hands src's failure to dst (what dst held is released); src is left empty. */
void why_move(struct why *dst, struct why *src);
/* Releases the words; w is empty again. */
void why_clear(struct why *w);

/*
 * The core's one way to stderr: a last message before abort(), for the
 * failures no caller can handle and no event handler can report (out of
 * memory). Everything else is an event or a returned diagnostic.
 */
__attribute__((noreturn)) void tf_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Set by the SIGINT/SIGTERM handler; long loops check it between atomic units. */
extern volatile int tf_interrupted;

#endif
