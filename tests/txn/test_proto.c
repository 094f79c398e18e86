/* SPDX-License-Identifier: MIT */
/*
 * The protocol registry and the check of a protocol's needs against a backend: the names the
 * parameter table offers are exactly the protocols built, and a protocol that needs masked-CAS,
 * messages or counter timestamps is refused (one line) by a backend that cannot give them.
 */
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>

#include <remora/params.h>

#include "txn/protocol.h"

TestSuite(txn_proto);

Test(txn_proto, registry_is_what_params_offer)
{
	const struct remora_param_def *d = remora_param_def(REMORA_P_PROTOCOL);
	char names[256];
	unsigned n = 0;

	txn_proto_names(names, sizeof(names), "|");
	cr_assert_str_eq(d->allowed, names, "params offer '%s', built: '%s'", d->allowed, names);
	for (unsigned i = 0; txn_proto_registry[i]; i++, n++) {
		struct txn_proto_ops ops;
		char err[128];

		cr_assert_not_null(codec_get(txn_proto_registry[i]->codec),
				   "protocol %s: codec not built", txn_proto_registry[i]->name);
		cr_assert_eq(txn_proto_select(txn_proto_registry[i]->name, &ops, err,
						 sizeof(err)), 0, "%s", err);
		cr_assert_str_eq(ops.name, txn_proto_registry[i]->name);
	}
	cr_assert_geq(n, 2, "ford and pandora at least");
}

/* A test-only protocol: only its name and flags matter to the check. */
static struct txn_proto_ops needy(uint32_t flags)
{
	return (struct txn_proto_ops){ .size = sizeof(struct txn_proto_ops), .name = "needy",
					  .flags = flags };
}

static struct remora_caps caps_of(uint32_t ops, uint32_t emulated, uint32_t flags)
{
	return (struct remora_caps){ .size = sizeof(struct remora_caps), .ops = ops,
				     .emulated_ops = emulated, .flags = flags };
}

#define OP(o) (1u << REMORA_OP_##o)
#define BASIC (OP(READ) | OP(WRITE) | OP(CAS) | OP(FAA))

Test(txn_proto, needs_are_checked_against_the_backend)
{
	struct txn_proto_ops p;
	struct remora_caps c;
	char err[160];

	/* Masked-CAS: native or emulated (the backend counts the emulation verbs) is fine. */
	p = needy(REMORA_PROTO_NEEDS_MCAS);
	c = caps_of(BASIC | OP(MCAS), 0, REMORA_CAP_NATIVE_MCAS);
	cr_assert_eq(txn_proto_check(&p, &c, false, err, sizeof(err)), 0, "%s", err);
	c = caps_of(BASIC | OP(MCAS), OP(MCAS), 0);
	cr_assert_eq(txn_proto_check(&p, &c, false, err, sizeof(err)), 0, "%s", err);
	c = caps_of(BASIC, 0, REMORA_CAP_MSG);
	cr_assert_eq(txn_proto_check(&p, &c, false, err, sizeof(err)), -REMORA_ECONFIG);
	cr_assert(strstr(err, "needy") && strstr(err, "masked-CAS") && !strchr(err, '\n'), "%s",
		  err);

	/* Messages. */
	p = needy(REMORA_PROTO_NEEDS_MSG);
	c = caps_of(BASIC | OP(MCAS), 0, REMORA_CAP_NATIVE_MCAS);
	cr_assert_eq(txn_proto_check(&p, &c, false, err, sizeof(err)), -REMORA_ECONFIG);
	cr_assert(strstr(err, "messages"), "%s", err);
	c.flags |= REMORA_CAP_MSG;
	cr_assert_eq(txn_proto_check(&p, &c, false, err, sizeof(err)), 0, "%s", err);

	/* Timestamps: the counter service needs FAA, the clock needs nothing. */
	p = needy(REMORA_PROTO_NEEDS_TS);
	c = caps_of(OP(READ) | OP(WRITE) | OP(CAS), 0, 0);
	cr_assert_eq(txn_proto_check(&p, &c, false, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(txn_proto_check(&p, &c, true, err, sizeof(err)), -REMORA_ECONFIG);
	cr_assert(strstr(err, "FAA"), "%s", err);

	/* Needing nothing runs anywhere. */
	p = needy(0);
	c = caps_of(OP(READ) | OP(WRITE) | OP(CAS), 0, 0);
	cr_assert_eq(txn_proto_check(&p, &c, true, err, sizeof(err)), 0, "%s", err);
}

Test(txn_proto, flags_in_words)
{
	char buf[64];

	txn_proto_flags_str(0, buf, sizeof(buf));
	cr_assert_str_eq(buf, "-");
	txn_proto_flags_str(REMORA_PROTO_NEEDS_TS | REMORA_PROTO_NEEDS_MCAS, buf, sizeof(buf));
	cr_assert_str_eq(buf, "timestamps, masked-CAS");
}

/* Every built protocol can be recovered after a whole-cluster crash; online recovery is a
 * stub until a protocol brings its own (-EOPNOTSUPP), and never crashes on a missing database
 * (pandora's and ford's shared op: -EINVAL; FORD with a database: -EOPNOTSUPP, see
 * tests/cluster/test_online.c). */
Test(txn_proto, recovery_entry_points)
{
	for (unsigned i = 0; txn_proto_registry[i]; i++) {
		struct txn_proto_ops ops;
		char err[128];
		uint16_t failed = 1;
		int rc;

		cr_assert_eq(txn_proto_select(txn_proto_registry[i]->name, &ops, err,
						 sizeof(err)), 0, "%s", err);
		cr_assert_not_null(ops.recover, "protocol %s: no whole-cluster recovery", ops.name);
		cr_assert_not_null(ops.recover_online);
		rc = ops.recover_online(NULL, &failed, 1);
		cr_assert(rc == -EOPNOTSUPP || rc == -EINVAL, "protocol %s: %d", ops.name, rc);
	}
}
