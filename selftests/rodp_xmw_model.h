/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The tests' reference model of an extended window's layout (Documentation/xmw.rst,
 * "Reference algorithm", written out cycle by cycle rather than computed): which memory byte
 * each window byte is. rodp_xmw checks the module against it on one host, wire_ops -x across
 * two.
 */
#ifndef RODP_XMW_MODEL_H
#define RODP_XMW_MODEL_H

#include <stddef.h>
#include <rodp-xmw-abi.h>

struct layout {
	enum rodp_xmw_kind kind;
	unsigned int n;
	struct rodp_xmw_entry e[4];
};

/* An entry of the MR with lkey at start: len-byte elements, repeat per cycle, dims
 * (stride, count), dimension 0 innermost. */
static inline struct rodp_xmw_entry xmw_ent(__u32 lkey, __u64 start, __u64 len, __u64 repeat,
					    unsigned int ndims, const __u64 (*dims)[2])
{
	struct rodp_xmw_entry e = {
		.key = lkey, .ndims = ndims, .start = start, .len = len, .repeat_count = repeat,
	};

	for (unsigned int i = 0; i < ndims; i++) {
		e.dims[i].stride = dims[i][0];
		e.dims[i].count = dims[i][1];
	}
	return e;
}

static inline __u64 xmw_elements(const struct rodp_xmw_entry *e)
{
	__u64 n = 1;

	for (unsigned int i = 0; i < e->ndims; i++)
		n *= e->dims[i].count;
	return n;
}

static inline __u64 xmw_element_at(const struct rodp_xmw_entry *e, __u64 k)
{
	__u64 a = e->start;

	for (unsigned int i = 0; i < e->ndims; i++) {
		a += e->dims[i].stride * (k % e->dims[i].count);
		k /= e->dims[i].count;
	}
	return a;
}

/*
 * The address of each window byte of l in out[] (at most max of them); returns the window's
 * length (capped at max).
 */
static inline size_t xmw_model(const struct layout *l, __u64 *out, size_t max)
{
	__u64 next[4] = { 0 };
	size_t w = 0;
	int more = 1;

	if (l->kind == RODP_XMW_KIND_COMPOSITE) {
		for (unsigned int i = 0; i < l->n; i++)
			for (__u64 k = 0; k < xmw_elements(&l->e[i]); k++)
				for (__u64 b = 0; b < l->e[i].len && w < max; b++)
					out[w++] = xmw_element_at(&l->e[i], k) + b;
		return w;
	}
	while (more) {
		more = 0;
		for (unsigned int i = 0; i < l->n; i++)
			for (__u64 r = 0; r < l->e[i].repeat_count; r++) {
				if (next[i] >= xmw_elements(&l->e[i]))
					continue;
				for (__u64 b = 0; b < l->e[i].len && w < max; b++)
					out[w++] = xmw_element_at(&l->e[i], next[i]) + b;
				next[i]++;
				more = 1;
			}
	}
	return w;
}

#endif
