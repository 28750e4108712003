/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The kernel tree's kselftest_harness.h with a longer default time limit per test. The
 * harness's 30 s is meant for native runs; rodp's tests run in a guest under TCG with KASAN
 * and lockdep, on machines that differ by a factor of two or more, so a test that takes 15 s
 * on one takes 32 s on another (rodp_odp_cost did, 2026-11-27). A test that hangs still ends
 * at the limit; tests that need longer name their own with TEST_F_TIMEOUT.
 */
#ifndef RODP_HARNESS_H
#define RODP_HARNESS_H

#include "kselftest_harness.h"

/* TEST and TEST_F expand this where they are used, so the new value applies to every test. */
#undef TEST_TIMEOUT_DEFAULT
#define TEST_TIMEOUT_DEFAULT 120

#endif
