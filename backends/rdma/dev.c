/* SPDX-License-Identifier: MIT */
/*
 * Device selection, at run time and never hard-coded: the first device with an active port (or
 * the backend parameters rdma_device / rdma_port), the GID to use (rdma_gid_index, else a
 * RoCE v2 GID holding an IPv4-mapped address, else any IP-based GID), and the path MTU
 * (rdma_mtu, else the port's active MTU). The parameters come from the transport cfg (the
 * cluster's parameter table hands over the config file's, flags' and REMORA_RDMA_* values).
 * The GID's IP address is where rdma_cm binds, so listeners and connections stay on the chosen
 * device and port.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rrdma.h"

/* The backend parameter key as given (rdma_device, ...), "" when it was not. */
static const char *param(const struct rrdma_tp *t, const char *key)
{
	const char *v = remora_backend_cfg_param(&t->cfg, key);

	return v ? v : "";
}

/* Parses an integer parameter; 0 when unset, 1 when set and valid, -1 when malformed. */
static int param_uint(const struct rrdma_tp *t, const char *key, unsigned long max,
		      unsigned long *out)
{
	const char *s = param(t, key);
	char *end;

	if (!s || !*s)
		return 0;
	errno = 0;
	*out = strtoul(s, &end, 10);
	if (errno || *end || end == s || *out > max || s[0] == '-')
		return -1;
	return 1;
}

static const char *port_state_name(enum ibv_port_state s)
{
	return ibv_port_state_str(s);
}

static int mtu_bytes(enum ibv_mtu m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128 << m : 0;
}

enum ibv_mtu rrdma_mtu_min(enum ibv_mtu a, enum ibv_mtu b)
{
	if (a < IBV_MTU_256 || a > IBV_MTU_4096)
		return b;
	if (b < IBV_MTU_256 || b > IBV_MTU_4096)
		return a;
	return a < b ? a : b;
}

static bool mtu_from_bytes(unsigned long v, enum ibv_mtu *m)
{
	for (enum ibv_mtu i = IBV_MTU_256; i <= IBV_MTU_4096; i++) {
		if ((unsigned long)mtu_bytes(i) == v) {
			*m = i;
			return true;
		}
	}
	return false;
}

static void list_names(struct ibv_device **list, int n, char *buf, size_t size)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int i = 0; i < n && used < size; i++)
		used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "",
					 ibv_get_device_name(list[i]));
}

static bool gid_is_v4mapped(const union ibv_gid *g)
{
	static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return memcmp(g->raw, prefix, sizeof(prefix)) == 0;
}

static bool gid_is_zero(const union ibv_gid *g)
{
	static const union ibv_gid zero;

	return memcmp(g, &zero, sizeof(zero)) == 0;
}

/* Rank of a GID table entry for rdma_cm: higher is better, 0 unusable. */
static int gid_rank(const struct ibv_gid_entry *e)
{
	bool v4 = gid_is_v4mapped(&e->gid);
	bool linklocal = e->gid.raw[0] == 0xfe && (e->gid.raw[1] & 0xc0) == 0x80;

	if (gid_is_zero(&e->gid) || e->gid_type == IBV_GID_TYPE_IB)
		return 0;
	if (e->gid_type == IBV_GID_TYPE_ROCE_V2)
		return v4 ? 4 : linklocal ? 2 : 3;
	return v4 ? 1 : 0; /* RoCE v1 with an IPv4 address: last resort */
}

/* Turns a GID into the socket address rdma_cm binds to (port 0: chosen at bind). */
static void gid_to_addr(const struct ibv_gid_entry *e, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (gid_is_v4mapped(&e->gid)) {
		struct sockaddr_in *in = (struct sockaddr_in *)ss;

		in->sin_family = AF_INET;
		memcpy(&in->sin_addr, &e->gid.raw[12], 4);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

		in6->sin6_family = AF_INET6;
		memcpy(&in6->sin6_addr, e->gid.raw, 16);
		if (e->gid.raw[0] == 0xfe && (e->gid.raw[1] & 0xc0) == 0x80)
			in6->sin6_scope_id = e->ndev_ifindex;
	}
}

/* Picks the GID: the configured index, or the best-ranked entry of the table. */
static int pick_gid(struct rrdma_tp *t, const struct ibv_port_attr *pa)
{
	struct rrdma_dev *d = &t->dev;
	struct ibv_gid_entry e, best = { 0 };
	unsigned long idx;
	int rank = 0, valid = 0, rc;

	rc = param_uint(t, "rdma_gid_index", INT_MAX, &idx);
	if (rc < 0)
		return remora_backend_error(t->tp, -REMORA_ECONFIG,
					    "rdma_gid_index='%s' is not a GID index",
					    param(t, "rdma_gid_index"));
	for (int i = 0; i < pa->gid_tbl_len; i++) {
		if (ibv_query_gid_ex(d->ctx, d->port, (uint32_t)i, &e, 0))
			continue;
		valid += !gid_is_zero(&e.gid);
		if (rc == 1 && (unsigned long)i == idx) {
			if (gid_is_zero(&e.gid) || e.gid_type == IBV_GID_TYPE_IB)
				break;
			best = e;
			rank = 1;
			break;
		}
		if (rc == 0 && gid_rank(&e) > rank) {
			rank = gid_rank(&e);
			best = e;
		}
	}
	if (rc == 1 && !rank)
		return remora_backend_error(t->tp, -REMORA_ECONFIG,
					    "rdma_gid_index=%lu: no IP-based GID at that index "
					    "on %s port %u (table of %d entries, %d in use)",
					    idx, d->name, d->port, pa->gid_tbl_len, valid);
	if (!rank)
		return remora_backend_error(t->tp, -ENODEV,
					    "%s port %u has no RoCE GID with an IP address (rdma_cm "
					    "needs one: give its netdev an address); use "
					    "REMORA_BACKEND=shm", d->name, d->port);
	d->gid_index = (int)best.gid_index;
	gid_to_addr(&best, &d->addr);
	rrdma_format_addr((struct sockaddr *)&d->addr, false, d->addr_str, sizeof(d->addr_str));
	return 0;
}

static int pick_mtu(struct rrdma_tp *t, const struct ibv_port_attr *pa)
{
	unsigned long v;
	int rc = param_uint(t, "rdma_mtu", 1u << 20, &v);

	t->dev.mtu = pa->active_mtu;
	if (rc == 0)
		return 0;
	if (rc < 0 || !mtu_from_bytes(v, &t->dev.mtu))
		return remora_backend_error(t->tp, -REMORA_ECONFIG,
					    "rdma_mtu='%s': use 256, 512, 1024, 2048 or 4096",
					    param(t, "rdma_mtu"));
	if (t->dev.mtu > pa->active_mtu)
		return remora_backend_error(t->tp, -REMORA_ECONFIG,
					    "rdma_mtu=%lu exceeds the active MTU %d of %s port "
					    "%u", v, mtu_bytes(pa->active_mtu), t->dev.name,
					    t->dev.port);
	return 0;
}

/*
 * The ACK timeout of every QP: 67 ms x 7 tries notices a dead peer in half a second, but a
 * peer whose kernel is starved for that long (an emulated guest, an overloaded host) fails
 * the verbs with retry-exceeded, so a deployment can raise it.
 */
static int pick_qp_timeout(struct rrdma_tp *t)
{
	unsigned long v;
	int rc = param_uint(t, "rdma_qp_timeout", RRDMA_QP_TIMEOUT_MAX, &v);

	t->dev.qp_timeout = RRDMA_QP_TIMEOUT;
	if (rc == 0)
		return 0;
	if (rc < 0 || v == 0)
		return remora_backend_error(t->tp, -REMORA_ECONFIG,
					    "rdma_qp_timeout='%s': use 1..%u (4.096 us x 2^N per "
					    "retransmit)", param(t, "rdma_qp_timeout"),
					    RRDMA_QP_TIMEOUT_MAX);
	t->dev.qp_timeout = (uint8_t)v;
	return 0;
}

/*
 * -ENETDOWN, the message naming the device and the state of each of its ports. When no device
 * was named, open_first() goes on to the next device and replaces the message if none is left.
 */
static int no_active_port(struct rrdma_tp *t, const struct ibv_device_attr *da)
{
	struct rrdma_dev *d = &t->dev;
	struct ibv_port_attr pa;
	char states[160];
	size_t used = 0;

	states[0] = '\0';
	for (unsigned p = 1; p <= da->phys_port_cnt && used < sizeof(states); p++)
		used += (size_t)snprintf(states + used, sizeof(states) - used, "%sport %u %s",
					 p > 1 ? ", " : "", p,
					 ibv_query_port(d->ctx, (uint8_t)p, &pa) ?
						 "unknown" : port_state_name(pa.state));
	return remora_backend_error(t->tp, -ENETDOWN,
				    "RDMA device %s has no ACTIVE port (%s): is its netdev up?",
				    d->name, states);
}

/* Finds an active port of an open device: the configured one, or the first active one. */
static int pick_port(struct rrdma_tp *t, const struct ibv_device_attr *da, unsigned long want,
		     struct ibv_port_attr *pa)
{
	struct rrdma_dev *d = &t->dev;

	if (want) {
		if (want > da->phys_port_cnt)
			return remora_backend_error(t->tp, -REMORA_ECONFIG,
						    "rdma_port=%lu: %s has %u port(s)", want,
						    d->name, da->phys_port_cnt);
		if (ibv_query_port(d->ctx, (uint8_t)want, pa))
			return remora_backend_error(t->tp, -errno, "%s port %lu: query: %s",
						    d->name, want, strerror(errno));
		if (pa->state != IBV_PORT_ACTIVE)
			return remora_backend_error(t->tp, -ENETDOWN,
						    "%s port %lu is %s, not ACTIVE (is its netdev "
						    "up?)", d->name, want,
						    port_state_name(pa->state));
		d->port = (uint8_t)want;
		return 0;
	}
	for (unsigned p = 1; p <= da->phys_port_cnt; p++) {
		if (ibv_query_port(d->ctx, (uint8_t)p, pa) == 0 && pa->state == IBV_PORT_ACTIVE) {
			d->port = (uint8_t)p;
			return 0;
		}
	}
	return no_active_port(t, da);
}

/* Opens device dev and picks port, GID and MTU on it. -ENETDOWN: no active port (try next). */
static int try_device(struct rrdma_tp *t, struct ibv_device *dev, unsigned long want_port)
{
	struct rrdma_dev *d = &t->dev;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	int rc;

	snprintf(d->name, sizeof(d->name), "%s", ibv_get_device_name(dev));
	d->ctx = ibv_open_device(dev);
	if (!d->ctx)
		return remora_backend_error(t->tp, -ENODEV, "cannot open RDMA device %s: %s",
					    d->name, strerror(errno));
	rc = ibv_query_device(d->ctx, &da) ? -errno : 0;
	if (!rc)
		rc = pick_port(t, &da, want_port, &pa);
	if (!rc && pa.link_layer != IBV_LINK_LAYER_ETHERNET)
		rc = remora_backend_error(t->tp, -ENODEV,
					  "%s port %u is InfiniBand; remora's rdma backend runs on "
					  "RoCE (rdma_cm over the port's IP address)", d->name, d->port);
	if (!rc)
		rc = pick_gid(t, &pa);
	if (!rc)
		rc = pick_mtu(t, &pa);
	if (!rc)
		rc = pick_qp_timeout(t);
	if (rc) {
		ibv_close_device(d->ctx);
		d->ctx = NULL;
		return rc;
	}
	d->atomics = da.atomic_cap != IBV_ATOMIC_NONE;
	d->rd_atomic = RRDMA_RD_ATOMIC;
	if (da.max_qp_rd_atom < d->rd_atomic)
		d->rd_atomic = (uint8_t)da.max_qp_rd_atom;
	if (da.max_qp_init_rd_atom < d->rd_atomic)
		d->rd_atomic = (uint8_t)da.max_qp_init_rd_atom;
	if (d->rd_atomic == 0)
		d->rd_atomic = 1;
	return 0;
}

static int open_first(struct rrdma_tp *t, struct ibv_device **list, int n, const char *want_dev,
		      unsigned long want_port)
{
	char names[256], unusable[256] = ""; /* a transport error message */

	for (int i = 0; i < n; i++) {
		int rc;

		if (want_dev && strcmp(ibv_get_device_name(list[i]), want_dev))
			continue;
		rc = try_device(t, list[i], want_port);
		/* A device named or a port asked for is the answer. Left to choose, pass over
		 * devices that are down or unusable here (InfiniBand, no IP-based GID), and
		 * keep the first reason in case no device is left. */
		if (want_dev || want_port || (rc != -ENETDOWN && rc != -ENODEV))
			return rc;
		if (rc == -ENODEV && !unusable[0])
			snprintf(unusable, sizeof(unusable), "%s", remora_transport_errmsg(t->tp));
	}
	if (unusable[0])
		return remora_backend_error(t->tp, -ENODEV, "%s", unusable);
	list_names(list, n, names, sizeof(names));
	if (want_dev)
		return remora_backend_error(t->tp, -ENODEV,
					    "RDMA device '%s' (rdma_device) not found; devices: "
					    "%s", want_dev, names);
	return remora_backend_error(t->tp, -ENETDOWN,
				    "no ACTIVE port on RDMA device(s) %s (is the netdev up?); use "
				    "REMORA_BACKEND=shm", names);
}

/* Names the devices the kernel has (its sysfs class), comma-separated; 0 when there are none. */
static int kernel_devices(char *buf, size_t size)
{
	DIR *d = opendir(RRDMA_SYSFS_CLASS);
	struct dirent *e;
	size_t used = 0;
	int n = 0;

	buf[0] = '\0';
	if (!d)
		return 0;
	while ((e = readdir(d)) && used < size) {
		if (e->d_name[0] == '.')
			continue;
		used += (size_t)snprintf(buf + used, size - used, "%s%s", n ? ", " : "", e->d_name);
		n++;
	}
	closedir(d);
	return n;
}

/*
 * -ENODEV when ibverbs lists no device. Two different fixes, so two messages: the kernel has
 * no RDMA device at all (make one, or use shm), or it has some that no userspace provider
 * drives (a common soft-RoCE mistake: ibverbs-providers not installed).
 */
static int no_device(struct rrdma_tp *t, int err)
{
	char names[256];

	if (kernel_devices(names, sizeof(names)))
		return remora_backend_error(t->tp, -ENODEV,
					    "no RDMA device usable: the kernel has %s, but libibverbs "
					    "loads no userspace provider for it (is ibverbs-providers "
					    "installed?); use REMORA_BACKEND=shm", names);
	return remora_backend_error(t->tp, -ENODEV,
				    "no RDMA device found (ibverbs lists none%s%s, and there is "
				    "none in " RRDMA_SYSFS_CLASS "; soft-RoCE: modprobe rdma_rxe, "
				    "then rdma link add rxe0 type rxe netdev <if>); use "
				    "REMORA_BACKEND=shm", err ? ": " : "",
				    err == ENOSYS ? "no verbs support in this kernel" :
				    err		  ? strerror(err) :
						    "");
}

int rrdma_dev_open(struct rrdma_tp *t)
{
	const char *want_dev = *param(t, "rdma_device") ? param(t, "rdma_device") : NULL;
	struct ibv_device **list;
	unsigned long want_port = 0;
	int n = 0, rc;

	rc = param_uint(t, "rdma_port", 255, &want_port);
	if (rc < 0 || (rc == 1 && want_port == 0))
		return remora_backend_error(t->tp, -REMORA_ECONFIG,
					    "rdma_port='%s': use a port number 1..255",
					    param(t, "rdma_port"));
	errno = 0;
	list = ibv_get_device_list(&n);
	if (!list || n == 0) {
		rc = errno;
		if (list)
			ibv_free_device_list(list);
		return no_device(t, rc);
	}
	rc = open_first(t, list, n, want_dev, want_port);
	ibv_free_device_list(list);
	if (rc)
		return rc;
	t->dev.pd = ibv_alloc_pd(t->dev.ctx);
	if (!t->dev.pd) {
		rc = -errno;
		ibv_close_device(t->dev.ctx);
		t->dev.ctx = NULL;
		return remora_backend_error(t->tp, rc, "%s: protection domain: %s", t->dev.name,
					    strerror(-rc));
	}
	return 0;
}

void rrdma_dev_close(struct rrdma_dev *d)
{
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->ctx)
		ibv_close_device(d->ctx);
	d->pd = NULL;
	d->ctx = NULL;
}
