/* SPDX-License-Identifier: MIT */
/*
 * Deterministic hashing for placement, index buckets, fingerprints and checksums. Every
 * process of a cluster must compute the same values, so nothing here depends on the host
 * (no seeds from the environment, no pointer values). The mixer is the splitmix64 finalizer
 * (Stafford's "Mix13"), a well-known 64-bit bijection with full avalanche; written here rather
 * than pulled from a library because it is four lines and must never change under us.
 */
#ifndef REMORA_STORE_HASH_H
#define REMORA_STORE_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * libxxhash's own header, compiled inline: the checksums here are over 20 to 200 bytes, where
 * the call through the PLT and XXH3's dispatch on the length cost as much as the hashing (and
 * a constant length picks its routine at compile time). Same algorithm, same values.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

static inline uint64_t store_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= UINT64_C(0xbf58476d1ce4e5b9);
	x ^= x >> 27;
	x *= UINT64_C(0x94d049bb133111eb);
	x ^= x >> 31;
	return x;
}

/* Hash of a (table, key) pair: the root of bucket, fingerprint and cache placement. */
static inline uint64_t store_key_hash(uint32_t table, uint64_t key)
{
	return store_mix64(key ^ store_mix64((uint64_t)table + 0x9e3779b97f4a7c15u));
}

/* x mapped uniformly onto [0, n) without a division (Lemire's multiply-shift). */
static inline uint64_t store_range(uint64_t x, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)x * n) >> 64);
}

/*
 * Checksum of a byte range; seed chains several ranges. XXH3-64 (libxxhash), the checksum of
 * RocksDB's blocks: the same value on every host, and 3 to 7 times faster than the word-by-word
 * mix it replaced (one multiply chain per 8 bytes), which was a fifth of a kvs transaction's
 * CPU on ford (log seal, record encode and decode). It finds torn images as well: any change
 * of the bytes changes the value but with probability 2^-64.
 */
static inline uint64_t store_csum(uint64_t seed, const void *p, size_t len)
{
	return XXH3_64bits_withSeed(p, len, seed);
}

#endif
