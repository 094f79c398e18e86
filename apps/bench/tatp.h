/* SPDX-License-Identifier: MIT */
/*
 * TATP (Telecom Application Transaction Processing benchmark, description 1.0): four tables
 * with their columns, the secondary sub_nbr table, the key layout and the input generator, for
 * the workload (tatp.c) and its tests. Prefix tatp_.
 *
 * Key layout (64 bits): the subscriber id in the low half, because LOTUS shards a key by its
 * bits 11:0 and TATP's critical field is the subscriber (the other protocols hash the whole
 * key):
 *
 *   subscriber        s_id
 *   access_info       ai_type (1..4) << 32 | s_id
 *   special_facility  sf_type (1..4) << 32 | s_id
 *   call_forwarding   (sf_type << 8 | start_time (0, 8, 16)) << 32 | s_id
 *   sub_nbr           sub_nbr   (the numeric value of the 15-digit SUB_NBR string, the s_id)
 */
#ifndef REMORA_APPS_TATP_H
#define REMORA_APPS_TATP_H

#include <stdint.h>

#include "workload.h"

enum tatp_table {
	TATP_SUBSCRIBER,
	TATP_ACCESS_INFO,
	TATP_SPECIAL_FACILITY,
	TATP_CALL_FORWARDING,
	TATP_SUB_NBR,          /* secondary: SUB_NBR -> S_ID (UpdateLocation, Insert/Delete CF) */
	TATP__TABLES
};

enum tatp_type {
	TATP_GET_SUBSCRIBER_DATA,
	TATP_GET_NEW_DESTINATION,
	TATP_GET_ACCESS_DATA,
	TATP_UPDATE_SUBSCRIBER_DATA,
	TATP_UPDATE_LOCATION,
	TATP_INSERT_CALL_FORWARDING,
	TATP_DELETE_CALL_FORWARDING,
	TATP__TYPES
};

struct tatp_subscriber {
	uint32_t s_id;
	char sub_nbr[16];         /* s_id, zero-padded to 15 digits */
	uint16_t bits;            /* bit_1 .. bit_10 in bits 0 .. 9 */
	uint8_t hex[10];          /* hex_1 .. hex_10: 0..15 */
	uint8_t byte2[10];        /* byte2_1 .. byte2_10 */
	uint8_t _pad[2];
	uint32_t msc_location;
	uint32_t vlr_location;
};
_Static_assert(sizeof(struct tatp_subscriber) == 52, "subscriber record layout");

struct tatp_access_info {
	uint32_t s_id;
	uint8_t ai_type;
	uint8_t data1, data2;
	char data3[4];
	char data4[6];
	uint8_t _pad[3];
};
_Static_assert(sizeof(struct tatp_access_info) == 20, "access_info record layout");

struct tatp_special_facility {
	uint32_t s_id;
	uint8_t sf_type;
	uint8_t is_active;
	uint8_t error_cntrl;
	uint8_t data_a;
	char data_b[6];
	uint8_t _pad[2];
};
_Static_assert(sizeof(struct tatp_special_facility) == 16, "special_facility record layout");

struct tatp_call_forwarding {
	uint32_t s_id;
	uint8_t sf_type;
	uint8_t start_time;
	uint8_t end_time;
	char numberx[16];
	uint8_t _pad[1];
};
_Static_assert(sizeof(struct tatp_call_forwarding) == 24, "call_forwarding record layout");

struct tatp_sub_nbr {
	char sub_nbr[16];
	uint32_t s_id;
	uint32_t _pad;
};
_Static_assert(sizeof(struct tatp_sub_nbr) == 24, "sub_nbr index layout");

static inline uint64_t tatp_key(uint64_t s_id, uint64_t local)
{
	return (local & 0xffffffffu) << 32 | (s_id & 0xffffffffu);
}

static inline uint64_t tatp_key_s_id(uint64_t key)
{
	return key & 0xffffffffu;
}

static inline uint64_t tatp_key_local(uint64_t key)
{
	return key >> 32;
}

static inline uint64_t tatp_cf_key(uint64_t s_id, unsigned sf_type, unsigned start_time)
{
	return tatp_key(s_id, (uint64_t)sf_type << 8 | start_time);
}

/* The A of the non-uniform subscriber id for P subscribers (TATP 1.0, section 2.1). */
static inline uint64_t tatp_nurand_a(uint64_t p)
{
	return p <= 1000000 ? 65535 : p <= 10000000 ? 1048575 : 2097151;
}

/* Non-uniform s_id in [1, p]: ((random(0, A) | random(1, p)) % p) + 1. */
static inline uint64_t tatp_subscriber_id(struct wl_rng *r, uint64_t p)
{
	uint64_t a = wl_rng_below(r, tatp_nurand_a(p) + 1);
	uint64_t b = 1 + wl_rng_below(r, p);

	return ((a | b) % p) + 1;
}

/* The inputs of one TATP transaction, packed into wl_input.key[]. */
struct tatp_in {
	uint32_t s_id;
	uint32_t vlr_location;
	char sub_nbr[16];
	char numberx[16];
	uint8_t sf_type, ai_type, start_time, end_time;
	uint8_t bit_1, data_a;
	uint8_t _pad[2];
};
_Static_assert(sizeof(struct tatp_in) <= sizeof(((struct wl_input *)0)->key), "tatp_in fits");

extern const struct wl_desc wl_tatp;

#endif
