/* SPDX-License-Identifier: MIT */
/*
 * The cluster secret and the proofs of the control plane's handshake (internal to
 * runtime/cluster; see docs/cluster.md, "Authentication and threat model").
 *
 * The secret is 32 random bytes (libsodium's randombytes), kept as 64 hex digits and a newline
 * in a key file of mode 0600. A proof is HMAC-SHA512-256 (libsodium's crypto_auth) under the
 * secret of a role label, the cluster name and both sides' fresh 32-byte nonces: the label keeps
 * a memory node's proof from being replayed as a client's, the nonces keep any proof from being
 * replayed on another connection.
 */
#ifndef REMORA_CLUSTER_AUTH_H
#define REMORA_CLUSTER_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <remora/params.h>

#define RAUTH_KEY_BYTES 32
#define RAUTH_NONCE_BYTES 32
#define RAUTH_PROOF_BYTES 32
#define RAUTH_PATH_MAX 512

enum rauth_role {
	RAUTH_MN, /* the memory node proves it holds the secret */
	RAUTH_CLIENT, /* a compute node or tool does */
};

/*
 * Reads the cluster's key file (remora_cluster_key_path), creating it with a new secret when it
 * does not exist and create is set (memory nodes). A file that group or others may read or
 * write is refused, as is one that holds no key. Returns 0 (1: this call created the file),
 * -REMORA_ECONFIG (missing, bad mode, bad contents) or -errno, with one line in err; path gets
 * the file's path either way.
 */
int rauth_key_load(const struct remora_params *p, bool create, uint8_t key[RAUTH_KEY_BYTES],
		   char *path, size_t pathlen, char *err, size_t errlen);
/* Fills n with fresh random bytes. */
void rauth_nonce(uint8_t n[RAUTH_NONCE_BYTES]);
/* The proof of role for this exchange; cluster is the NUL-padded field of the HELLO. */
void rauth_proof(uint8_t out[RAUTH_PROOF_BYTES], const uint8_t key[RAUTH_KEY_BYTES],
		 enum rauth_role role, const char cluster[64],
		 const uint8_t client_nonce[RAUTH_NONCE_BYTES],
		 const uint8_t mn_nonce[RAUTH_NONCE_BYTES]);
/* Whether proof is role's proof for this exchange (constant time). */
bool rauth_check(const uint8_t proof[RAUTH_PROOF_BYTES], const uint8_t key[RAUTH_KEY_BYTES],
		 enum rauth_role role, const char cluster[64],
		 const uint8_t client_nonce[RAUTH_NONCE_BYTES],
		 const uint8_t mn_nonce[RAUTH_NONCE_BYTES]);
/* Whether two proofs are equal (constant time). */
bool rauth_equal(const uint8_t a[RAUTH_PROOF_BYTES], const uint8_t b[RAUTH_PROOF_BYTES]);

#endif
