/* Helpers for the cmocka tests: temporary directories and child processes.
 * Single-threaded use from test bodies. */
#ifndef DBX_TESTS_TESTUTIL_H
#define DBX_TESTS_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <cmocka.h>

/* mkdtemp under $TMPDIR (or /tmp) with the given prefix; abort on failure.
 * Returns a malloc'd path; remove with dbx_test_rmrf() then free(). */
char *dbx_test_tmpdir(const char *prefix);
/* rm -rf path (dbx_fs_remove_tree); silent on missing paths and failures. */
void dbx_test_rmrf(const char *path);
/* 1 if some regular file under path (or path itself, a file) holds the
 * bytes of needle; symlinks are not followed. 0 otherwise (also when path
 * is missing). */
int dbx_test_tree_holds(const char *path, const char *needle);
/* Path of the durabox binary from $DBX_BIN; fails the test when unset. */
const char *dbx_test_bin(void);
/* Resident KiB of this process's mappings of the LMDB file data.mdb in the
 * store directory dir (/proc/self/smaps); 0 when it is not mapped. Fails the
 * test when dir or smaps cannot be read. */
long dbx_test_store_rss_kib(const char *dir);

#endif
