/* SPDX-License-Identifier: MIT */
/*
 * The cluster secret: where its key file lives, creating and reading it, and the handshake's
 * proofs. Every primitive is libsodium's; nothing here is hand-written cryptography.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include <remora/cluster.h>

#include "cluster/auth.h"

_Static_assert(RAUTH_KEY_BYTES == crypto_auth_KEYBYTES, "crypto_auth key size");
_Static_assert(RAUTH_PROOF_BYTES == crypto_auth_BYTES, "crypto_auth tag size");

#define KEY_HEX (2 * RAUTH_KEY_BYTES)

/* The backends' default pool directories (dir = ""): the key lives beside the pools. */
static const char *default_dir(const struct remora_params *p)
{
	return strcmp(remora_params_str(p, REMORA_P_BACKEND), "pmem") == 0 ? "/var/tmp"
									    : "/dev/shm";
}

int remora_cluster_key_path(const struct remora_params *p, char *buf, size_t len)
{
	const char *file = remora_params_str(p, REMORA_P_KEY_FILE);
	const char *dir = remora_params_str(p, REMORA_P_DIR);
	int n;

	if (*file)
		n = snprintf(buf, len, "%s", file);
	else
		n = snprintf(buf, len, "%s/remora-%s-key", *dir ? dir : default_dir(p),
			     remora_params_str(p, REMORA_P_CLUSTER));
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int remora_cluster_key_remove(const struct remora_params *p)
{
	char path[RAUTH_PATH_MAX];
	int rc = remora_cluster_key_path(p, path, sizeof(path));

	if (rc)
		return rc;
	return unlink(path) < 0 ? -errno : 0;
}

static int lib_init(char *err, size_t errlen)
{
	if (sodium_init() < 0) {
		snprintf(err, errlen, "libsodium could not be initialised");
		return -ENOSYS;
	}
	return 0;
}

/* Reads the key from an open key file, after checking who may read it. */
static int read_key(int fd, const char *path, uint8_t key[RAUTH_KEY_BYTES], char *err,
		    size_t errlen)
{
	char text[KEY_HEX + 8];
	struct stat st;
	size_t bin_len = 0;
	ssize_t n;

	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "key file %s: %s", path, strerror(errno));
		return -errno;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "key file %s is not a regular file", path);
		return -REMORA_ECONFIG;
	}
	/*
	 * The default key file lives in a directory everyone may write (/dev/shm): one planted by
	 * another user, with a key of theirs, would hand them the cluster.
	 */
	if (st.st_uid != geteuid()) {
		snprintf(err, errlen,
			 "key file %s belongs to uid %u, not to us (uid %u): refused; remove it or "
			 "set key_file",
			 path, (unsigned)st.st_uid, (unsigned)geteuid());
		return -REMORA_ECONFIG;
	}
	if (st.st_mode & 077) {
		snprintf(err, errlen,
			 "key file %s may be read or written by group or others (mode %04o): "
			 "refused; chmod 600 %s",
			 path, (unsigned)(st.st_mode & 07777), path);
		return -REMORA_ECONFIG;
	}
	n = read(fd, text, sizeof(text) - 1);
	if (n < 0) {
		snprintf(err, errlen, "key file %s: %s", path, strerror(errno));
		return -errno;
	}
	while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
		n--;
	if (n != KEY_HEX || sodium_hex2bin(key, RAUTH_KEY_BYTES, text, KEY_HEX, NULL, &bin_len,
					   NULL) != 0 ||
	    bin_len != RAUTH_KEY_BYTES) {
		snprintf(err, errlen, "key file %s holds no cluster key (%d hex digits expected)",
			 path, KEY_HEX);
		return -REMORA_ECONFIG;
	}
	return 0;
}

/*
 * Writes a new secret to a temporary file of mode 0600 and links it into place, so that a
 * process that finds the key file always finds it whole; when two memory nodes start at once,
 * the first link wins and the other reads the winner's key. Returns 0, -EEXIST or -errno.
 */
static int create_key(const char *path, uint8_t key[RAUTH_KEY_BYTES], char *err, size_t errlen)
{
	char tmp[RAUTH_PATH_MAX + 8], text[KEY_HEX + 2];
	int fd, rc = 0;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= sizeof(tmp))
		return -ENAMETOOLONG;
	fd = mkostemp(tmp, O_CLOEXEC); /* mode 0600 */
	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "key file %s: cannot create it: %s", path, strerror(-rc));
		return rc;
	}
	randombytes_buf(key, RAUTH_KEY_BYTES);
	sodium_bin2hex(text, sizeof(text), key, RAUTH_KEY_BYTES);
	text[KEY_HEX] = '\n';
	if (fchmod(fd, 0600) < 0 || write(fd, text, KEY_HEX + 1) != KEY_HEX + 1 ||
	    link(tmp, path) < 0)
		rc = -errno;
	sodium_memzero(text, sizeof(text));
	close(fd);
	unlink(tmp);
	if (rc && rc != -EEXIST)
		snprintf(err, errlen, "key file %s: cannot create it: %s", path, strerror(-rc));
	return rc;
}

int rauth_key_load(const struct remora_params *p, bool create, uint8_t key[RAUTH_KEY_BYTES],
		   char *path, size_t pathlen, char *err, size_t errlen)
{
	int rc = lib_init(err, errlen), fd;

	if (rc)
		return rc;
	rc = remora_cluster_key_path(p, path, pathlen);
	if (rc) {
		snprintf(err, errlen, "key file: path too long");
		return rc;
	}
	for (unsigned attempt = 0;; attempt++) {
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd >= 0)
			break;
		rc = -errno;
		if (rc == -ENOENT && create && attempt < 3) {
			rc = create_key(path, key, err, errlen);
			if (rc == 0)
				return 1;
			if (rc == -EEXIST)
				continue; /* another memory node created it first: use that one */
			return rc;
		}
		if (rc == -ENOENT) {
			snprintf(err, errlen,
				 "no cluster key: key file %s does not exist (the cluster's first "
				 "memory node creates it; on another host, copy it there with mode "
				 "0600 or set key_file)",
				 path);
			return -REMORA_ECONFIG;
		}
		snprintf(err, errlen, "key file %s: %s", path, strerror(-rc));
		return rc;
	}
	rc = read_key(fd, path, key, err, errlen);
	close(fd);
	return rc;
}

void rauth_nonce(uint8_t n[RAUTH_NONCE_BYTES])
{
	randombytes_buf(n, RAUTH_NONCE_BYTES);
}

/* label (16) | cluster (64) | client nonce | memory node nonce */
#define MSG_BYTES (16 + 64 + 2 * RAUTH_NONCE_BYTES)

static void proof_msg(uint8_t msg[MSG_BYTES], enum rauth_role role, const char cluster[64],
		      const uint8_t cn_nonce[RAUTH_NONCE_BYTES],
		      const uint8_t mn_nonce[RAUTH_NONCE_BYTES])
{
	static const char labels[2][16] = { "remora mn proof", "remora cl proof" };
	size_t n = strnlen(cluster, 64);

	memset(msg, 0, MSG_BYTES);
	memcpy(msg, labels[role == RAUTH_MN ? 0 : 1], 16);
	memcpy(msg + 16, cluster, n); /* the field up to its NUL: padding bytes do not count */
	memcpy(msg + 16 + 64, cn_nonce, RAUTH_NONCE_BYTES);
	memcpy(msg + 16 + 64 + RAUTH_NONCE_BYTES, mn_nonce, RAUTH_NONCE_BYTES);
}

void rauth_proof(uint8_t out[RAUTH_PROOF_BYTES], const uint8_t key[RAUTH_KEY_BYTES],
		 enum rauth_role role, const char cluster[64],
		 const uint8_t client_nonce[RAUTH_NONCE_BYTES],
		 const uint8_t mn_nonce[RAUTH_NONCE_BYTES])
{
	uint8_t msg[MSG_BYTES];

	proof_msg(msg, role, cluster, client_nonce, mn_nonce);
	crypto_auth(out, msg, sizeof(msg), key);
}

bool rauth_check(const uint8_t proof[RAUTH_PROOF_BYTES], const uint8_t key[RAUTH_KEY_BYTES],
		 enum rauth_role role, const char cluster[64],
		 const uint8_t client_nonce[RAUTH_NONCE_BYTES],
		 const uint8_t mn_nonce[RAUTH_NONCE_BYTES])
{
	uint8_t msg[MSG_BYTES];

	proof_msg(msg, role, cluster, client_nonce, mn_nonce);
	return crypto_auth_verify(proof, msg, sizeof(msg), key) == 0;
}

bool rauth_equal(const uint8_t a[RAUTH_PROOF_BYTES], const uint8_t b[RAUTH_PROOF_BYTES])
{
	return sodium_memcmp(a, b, RAUTH_PROOF_BYTES) == 0;
}
