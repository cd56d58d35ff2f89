/*
 * version.c - component-wise version comparison (see version.h for the rules).
 *
 * Invariant: a cursor walks each string once; a component is [digits][tail]
 * up to the next '.' or the end. Comparing digit runs by length after
 * stripping leading zeros, then byte by byte, equals integer comparison for
 * any length.
 */
#include "version.h"

#include <limits.h>
#include <string.h>

struct vcomp {
	const char *digits; /* leading zeros stripped */
	size_t ndigits;
	const char *tail;
	size_t ntail;
};

/* Splits the component at *p and advances *p past it and its dot; 0 at the end. */
static int next_comp(const char **p, struct vcomp *c)
{
	const char *s = *p;

	memset(c, 0, sizeof(*c));
	if (s == NULL || *s == '\0')
		return 0;
	while (*s == '0' && s[1] >= '0' && s[1] <= '9')
		s++;
	c->digits = s;
	while (*s >= '0' && *s <= '9')
		s++;
	c->ndigits = (size_t)(s - c->digits);
	c->tail = s;
	while (*s != '\0' && *s != '.')
		s++;
	c->ntail = (size_t)(s - c->tail);
	if (*s == '.')
		s++;
	*p = s;
	return 1;
}

static int cmp_digits(const struct vcomp *a, const struct vcomp *b)
{
	size_t la = a->ndigits, lb = b->ndigits;
	const char *da = a->digits, *db = b->digits;

	/* "0" and "" (an absent component) are both zero. */
	if (la == 1 && da[0] == '0')
		la = 0;
	if (lb == 1 && db[0] == '0')
		lb = 0;
	if (la != lb)
		return la < lb ? -1 : 1;
	return la ? memcmp(da, db, la) : 0;
}

static int cmp_comp(const struct vcomp *a, const struct vcomp *b)
{
	int r = cmp_digits(a, b);
	size_t n;

	if (r != 0)
		return r;
	/* Same number: a tail marks a pre-release, older than the bare number. */
	if (a->ntail == 0 || b->ntail == 0)
		return a->ntail == b->ntail ? 0 : (a->ntail == 0 ? 1 : -1);
	n = a->ntail < b->ntail ? a->ntail : b->ntail;
	r = memcmp(a->tail, b->tail, n);
	if (r != 0)
		return r < 0 ? -1 : 1;
	return a->ntail == b->ntail ? 0 : (a->ntail < b->ntail ? -1 : 1);
}

int version_cmp_n(const char *a, const char *b, int n)
{
	const char *pa = a, *pb = b;
	struct vcomp ca, cb;
	int i, more_a, more_b, r;

	if (a == NULL || *a == '\0' || b == NULL || *b == '\0') {
		int ea = a == NULL || *a == '\0', eb = b == NULL || *b == '\0';
		return ea == eb ? 0 : (ea ? -1 : 1);
	}
	for (i = 0; n < 0 || i < n; i++) {
		more_a = next_comp(&pa, &ca);
		more_b = next_comp(&pb, &cb);
		if (!more_a && !more_b)
			return 0;
		r = cmp_comp(&ca, &cb);
		if (r != 0)
			return r;
	}
	return 0;
}

int version_cmp(const char *a, const char *b)
{
	return version_cmp_n(a, b, -1);
}

int version_has_prefix(const char *v, const char *prefix)
{
	const char *pv = v, *pp = prefix;
	struct vcomp cv, cp;

	if (v == NULL || prefix == NULL)
		return 0;
	while (next_comp(&pp, &cp)) {
		if (!next_comp(&pv, &cv))
			return 0;
		if (cmp_comp(&cv, &cp) != 0)
			return 0;
	}
	return 1;
}

int version_valid(const char *s)
{
	int digits = 0;

	if (s == NULL || *s == '\0')
		return 0;
	for (; *s != '\0'; s++) {
		if (*s >= '0' && *s <= '9') {
			digits++;
		} else if (*s == '.' && digits > 0) {
			digits = 0;
		} else {
			return 0;
		}
	}
	return digits > 0;
}

long version_component(const char *s, int i)
{
	const char *p = s;
	struct vcomp c;
	long v = 0;
	size_t k;

	for (int j = 0; j <= i; j++) {
		if (!next_comp(&p, &c))
			return 0;
	}
	if (c.ntail != 0 || c.ndigits == 0)
		return VERSION_NOT_NUMERIC;
	for (k = 0; k < c.ndigits; k++) {
		if (v > (LONG_MAX - 9) / 10)
			return VERSION_NOT_NUMERIC;
		v = v * 10 + (c.digits[k] - '0');
	}
	return v;
}
