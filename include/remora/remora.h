/* SPDX-License-Identifier: MIT */
/* The umbrella header of libremora: everything an application may include. */
#ifndef REMORA_REMORA_H
#define REMORA_REMORA_H

#include <remora/error.h>
#include <remora/sched.h>
#include <remora/transport.h>
#include <remora/tx.h>

#endif
