/*
 * pep508.h - Python dependency specifiers (PEP 508) as wheels write them in
 * their METADATA's Requires-Dist: "name[extra,...] specifier ; marker".
 *
 * The static lock check (compat_lock.c) reads each pinned distribution's
 * recorded requirements with these and evaluates their markers for the
 * stack's target (platform, Python, extras), as pip would on that machine.
 * Specifiers are judged by compat_spec_allows() (kb.h).
 *
 * Ownership: pep508_parse() fills a struct that owns its strings; release it
 * with pep508_req_release(). The evaluator allocates nothing.
 */
#ifndef TFPROV_PEP508_H
#define TFPROV_PEP508_H

#include <stddef.h>

#include "error.h"

struct pep508_req {
	char *name;    /* PEP 503 normalized */
	char **extras; /* normalized (PEP 685) */
	size_t nextras;
	char *spec;   /* the specifier set without blanks or parentheses; "" for any */
	char *url;    /* "name @ URL", else NULL */
	char *marker; /* the text after ';', else NULL */
};

/* 0 on success; TF_EMANIFEST with why when the text is not a PEP 508 requirement. */
int pep508_parse(const char *text, struct pep508_req *out, struct why *why);
void pep508_req_release(struct pep508_req *r);

/* The environment markers of one target. extras: the distribution's active extras. */
struct pep508_env {
	const char *python_version;      /* "3.10" */
	const char *python_full_version; /* "3.10.13", or python_version when unknown */
	const char *sys_platform;        /* "linux", "win32" */
	const char *platform_system;     /* "Linux", "Windows" */
	const char *platform_machine;    /* "x86_64", "AMD64" */
	const char *os_name;             /* "posix", "nt" */
	const char *const *extras;
	size_t nextras;
};

/* Fills env for a stack platform ("linux-x86_64", "wsl2", "windows-x86_64"). */
void pep508_env_for(struct pep508_env *env, int windows, const char *python_version,
                    const char *python_full_version);

/* 1 true, 0 false, TF_EMANIFEST when it cannot be evaluated (why says why). */
int pep508_marker_eval(const char *marker, const struct pep508_env *env, struct why *why);

#endif
