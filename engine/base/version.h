/*
 * version.h - dotted version strings compared the way NVIDIA and TensorFlow
 * number things: component by component, as integers.
 *
 * "535.104.05" > "535.86.09" (104 > 86, not a string compare), "455.32" ==
 * "455.32.0" (missing components count as 0), "05" == "5". Digits are compared
 * as digit strings, so no component can overflow. A component may carry a
 * non-numeric tail after its digits ("1.0rc1"): the tail makes it sort before
 * the same number without one (a pre-release), and two tails compare as
 * strings. NULL and "" sort before every real version. The functions never
 * allocate and never fail.
 */
#ifndef TFPROV_VERSION_H
#define TFPROV_VERSION_H

/* <0, 0, >0 as a is older than, equal to, newer than b. */
int version_cmp(const char *a, const char *b);
/* Compares only the first n components: version_cmp_n("12.3.2", "12.3", 2) == 0. */
int version_cmp_n(const char *a, const char *b, int n);
/* 1 when v starts with all of prefix's components: ("12.3.2", "12.3") yes, ("12.30", "12.3") no. */
int version_has_prefix(const char *v, const char *prefix);
/* 1 for one or more dot-separated runs of digits ("12", "535.104.05"), else 0. */
int version_valid(const char *s);
/*
 * Component i (0-based) as a long: a value, not a status. 0 if absent,
 * VERSION_NOT_NUMERIC if not numeric or too large (messages print it as -1).
 */
#define VERSION_NOT_NUMERIC (-1L)
long version_component(const char *s, int i);

#endif
