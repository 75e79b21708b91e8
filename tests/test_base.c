/* Unit tests of base/: error names and messages, log levels, helpers, the
 * allocation-failure hook, files, encodings, digests, uuids, and the
 * protobuf helpers of protos/pb.h. */
#include "tests/testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/codec.h"
#include "base/err.h"
#include "base/fs.h"
#include "base/hash.h"
#include "base/util.h"
#include "protos/pb.h"

static void test_base_strerror_names_every_code(void **state) {
  (void)state;
  assert_string_equal(dbx_strerror(DBX_OK), "success");
  assert_string_equal(dbx_strerror(DBX_ESTOREFULL), "storage full");
  assert_string_equal(dbx_err_name(DBX_ENOTFOUND), "DBX_ENOTFOUND");
  for (int e = 0; e < DBX_ERR_COUNT_; e++) {
    assert_non_null(dbx_strerror((dbx_err)e));
    assert_string_not_equal(dbx_strerror((dbx_err)e), "unknown error");
  }
  assert_string_equal(dbx_strerror((dbx_err)999), "unknown error");
}

static void test_base_log_level_parse(void **state) {
  (void)state;
  dbx_log_level l = DBX_LOG_OFF;
  assert_int_equal(dbx_log_level_parse("warn", &l), 0);
  assert_int_equal(l, DBX_LOG_WARN);
  assert_int_equal(dbx_log_level_parse("DEBUG", &l), 0);
  assert_int_equal(l, DBX_LOG_DEBUG);
  assert_int_equal(dbx_log_level_parse("loud", &l), -1);
  assert_int_equal(dbx_log_level_parse(NULL, &l), -1);
}

static void test_base_asprintf_and_strndup(void **state) {
  (void)state;
  char *s = dbx_asprintf("%s-%d", "run", 42);
  assert_string_equal(s, "run-42");
  free(s);
  s = dbx_strndup("abcdef", 3);
  assert_string_equal(s, "abc");
  free(s);
  assert_null(dbx_strdup(NULL));
}

static void test_base_clocks_advance(void **state) {
  (void)state;
  int64_t a = dbx_mono_ns();
  int64_t b = dbx_mono_ns();
  assert_true(b >= a);
  assert_true(dbx_wall_ns() > (int64_t)1600000000 * 1000000000);
}

/* ------------------------------------------------------------ alloc hook */

static void test_base_alloc_fails_exactly_the_nth(void **state) {
  (void)state;
  dbx_alloc_fail_at(3);
  void *a = dbx_malloc(16), *b = dbx_calloc(2, 8);
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal(dbx_alloc_failed(), 0);
  assert_null(dbx_malloc(16)); /* the 3rd */
  assert_int_equal(dbx_alloc_failed(), 1);
  void *c = dbx_malloc(16); /* one failure only */
  assert_non_null(c);
  assert_int_equal(dbx_alloc_count(), 4);
  dbx_alloc_fail_at(0);
  void *d = dbx_malloc(16); /* disarmed: not counted */
  assert_non_null(d);
  assert_int_equal(dbx_alloc_count(), 4);
  dbx_free(a);
  dbx_free(b);
  free(c); /* either family frees */
  dbx_free(d);
}

static void test_base_alloc_realloc_failure_keeps_the_block(void **state) {
  (void)state;
  char *p = dbx_malloc(4);
  assert_non_null(p);
  memcpy(p, "abc", 4);
  dbx_alloc_fail_at(1);
  assert_null(dbx_realloc(p, 1 << 20));
  dbx_alloc_fail_at(0);
  assert_string_equal(p, "abc");
  char *q = dbx_realloc(p, 64);
  assert_non_null(q);
  assert_string_equal(q, "abc");
  dbx_free(q);
}

static void test_base_alloc_string_helpers_go_through_the_hook(void **state) {
  (void)state;
  dbx_alloc_fail_at(1);
  assert_null(dbx_strdup("x"));
  dbx_alloc_fail_at(1);
  assert_null(dbx_strndup("xyz", 2));
  dbx_alloc_fail_at(1);
  assert_null(dbx_asprintf("%d", 7));
  dbx_alloc_fail_at(LONG_MAX); /* count only */
  char *s = dbx_asprintf("%s/%s", "a", "b"), *t = dbx_strdup(s);
  assert_int_equal(dbx_alloc_count(), 2);
  assert_int_equal(dbx_alloc_failed(), 0);
  dbx_alloc_fail_at(0);
  assert_string_equal(t, "a/b");
  free(s);
  free(t);
}

/* Run op with each of its allocations failing in turn: each run must fail
 * with DBX_ENOMEM (and leak nothing: ASan and valgrind check), until the run
 * where no injected failure lands, which must succeed. Returns the number of
 * allocations op makes. */
typedef dbx_err (*op_fn)(void *ud);
static long sweep_allocations(op_fn op, void *ud) {
  for (long n = 1;; n++) {
    dbx_alloc_fail_at(n);
    dbx_err rc = op(ud);
    int failed = dbx_alloc_failed();
    dbx_alloc_fail_at(0);
    if (!failed) {
      assert_int_equal(rc, DBX_OK);
      return n - 1;
    }
    assert_int_equal(rc, DBX_ENOMEM);
    assert_true(n < 1000);
  }
}

/* ------------------------------------------------------------ files */

static void write_file(const char *path, const void *data, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, data, n), (ssize_t)n);
  close(fd);
}

static void test_base_fs_read_all_reads_bytes_and_terminates(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("tbase");
  char *path = dbx_asprintf("%s/f", dir);
  size_t n = 100000; /* several doublings past a pipe's first 4 KiB */
  char *data = malloc(n);
  for (size_t i = 0; i < n; i++) data[i] = (char)(i * 7);
  write_file(path, data, n);
  char *got = NULL;
  size_t len = 1;
  assert_int_equal(dbx_fs_read_all(path, &got, &len), DBX_OK);
  assert_int_equal(len, n);
  assert_memory_equal(got, data, n);
  assert_int_equal(got[n], '\0');
  free(got);

  write_file(path, "", 0);
  assert_int_equal(dbx_fs_read_all(path, &got, &len), DBX_OK);
  assert_int_equal(len, 0);
  assert_string_equal(got, "");
  free(got);

  /* a pipe: no size to start from */
  int p[2];
  assert_int_equal(pipe(p), 0);
  assert_int_equal(write(p[1], data, 10000), 10000);
  close(p[1]);
  assert_int_equal(dbx_fs_read_fd(p[0], &got, &len), DBX_OK);
  close(p[0]);
  assert_int_equal(len, 10000);
  assert_memory_equal(got, data, 10000);
  free(got);

  char *missing = dbx_asprintf("%s/none", dir);
  got = (char *)1;
  assert_int_equal(dbx_fs_read_all(missing, &got, &len), DBX_ENOTFOUND);
  assert_null(got);
  assert_int_equal(errno, ENOENT);
  assert_int_equal(dbx_fs_read_all(dir, &got, NULL), DBX_EINVAL);
  assert_int_equal(errno, EISDIR);
  assert_int_equal(dbx_fs_read_all("", &got, NULL), DBX_EINVAL);
  free(missing);
  free(data);
  free(path);
  dbx_test_rmrf(dir);
  free(dir);
}

static dbx_err read_op(void *ud) {
  char *got = NULL;
  size_t len = 0;
  dbx_err rc = dbx_fs_read_all(ud, &got, &len);
  if (rc == DBX_OK && (len != 9000 || got[8999] != 'z')) rc = DBX_EIO;
  free(got);
  return rc;
}

static void test_base_fs_read_all_survives_each_allocation_failing(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("tbase");
  char *path = dbx_asprintf("%s/f", dir);
  char buf[9000];
  memset(buf, 'z', sizeof buf);
  write_file(path, buf, sizeof buf);
  assert_int_equal(sweep_allocations(read_op, path), 1); /* sized from fstat */
  free(path);
  dbx_test_rmrf(dir);
  free(dir);
}

static int is_dir(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static void test_base_fs_mkdirs_makes_each_level(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("tbase");
  char *deep = dbx_asprintf("%s/a//b/c/", dir);
  assert_int_equal(dbx_fs_mkdirs(deep, 0700), DBX_OK);
  char *c = dbx_asprintf("%s/a/b/c", dir);
  assert_true(is_dir(c));
  struct stat sb;
  assert_int_equal(stat(c, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0700);
  assert_int_equal(dbx_fs_mkdirs(c, 0700), DBX_OK); /* exists: fine */
  char *file = dbx_asprintf("%s/a/file", dir);
  write_file(file, "x", 1);
  char *under = dbx_asprintf("%s/a/file/d", dir);
  assert_int_equal(dbx_fs_mkdirs(under, 0700), DBX_EIO);
  assert_int_equal(errno, ENOTDIR);
  assert_int_equal(dbx_fs_mkdirs(file, 0700), DBX_EIO); /* a file, not a directory */
  assert_int_equal(errno, ENOTDIR);
  assert_int_equal(dbx_fs_mkdirs("", 0700), DBX_EINVAL);
  assert_int_equal(dbx_fs_mkdirs(NULL, 0700), DBX_EINVAL);
  free(deep);
  free(c);
  free(file);
  free(under);
  dbx_test_rmrf(dir);
  free(dir);
}

/* A tree whose paths are longer than PATH_MAX (built with chdir, as a
 * command in a sandbox would with mkdir loops) is removed whole. */
static void test_base_fs_remove_tree_deeper_than_path_max(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("tbase-deep");
  char name[201];
  memset(name, 'd', 200);
  name[200] = 0;
  int top = open(".", O_RDONLY | O_DIRECTORY);
  assert_true(top >= 0);
  assert_int_equal(chdir(dir), 0);
  for (int i = 0; i < 40; i++) { /* 40 x 201 bytes: about twice PATH_MAX */
    assert_int_equal(mkdir(name, 0700), 0);
    assert_int_equal(chdir(name), 0);
  }
  int fd = open("leaf", O_WRONLY | O_CREAT, 0600);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(fchdir(top), 0);
  close(top);
  assert_int_equal(dbx_fs_remove_tree(dir), DBX_OK);
  assert_int_equal(access(dir, F_OK), -1);
  free(dir);
}

static void test_base_fs_remove_tree_removes_links_not_targets(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("tbase");
  char *keep = dbx_test_tmpdir("tbase-keep");
  char *kept = dbx_asprintf("%s/precious", keep);
  write_file(kept, "p", 1);
  char *tree = dbx_asprintf("%s/t", dir);
  char *sub = dbx_asprintf("%s/t/x/y", dir);
  assert_int_equal(dbx_fs_mkdirs(sub, 0700), DBX_OK);
  char *f1 = dbx_asprintf("%s/t/x/y/f", dir), *f2 = dbx_asprintf("%s/t/g", dir);
  write_file(f1, "1", 1);
  write_file(f2, "2", 1);
  char *link = dbx_asprintf("%s/t/x/out", dir);
  assert_int_equal(symlink(keep, link), 0);
  assert_int_equal(dbx_fs_remove_tree(tree), DBX_OK);
  assert_int_equal(access(tree, F_OK), -1);
  assert_int_equal(access(kept, F_OK), 0); /* the link's target survives */
  assert_int_equal(dbx_fs_remove_tree(tree), DBX_OK); /* missing: fine */
  assert_int_equal(dbx_fs_remove_tree(kept), DBX_OK); /* a single file */
  assert_int_equal(access(kept, F_OK), -1);
  assert_int_equal(dbx_fs_remove_tree(""), DBX_EINVAL);
  assert_int_equal(dbx_fs_remove_tree(dir), DBX_OK);
  assert_int_equal(access(dir, F_OK), -1);
  free(tree);
  free(sub);
  free(f1);
  free(f2);
  free(link);
  free(kept);
  dbx_test_rmrf(keep);
  free(keep);
  free(dir);
}

/* ------------------------------------------------------------ encodings */

static int utf8(const char *s, size_t n) { return dbx_utf8_valid((const uint8_t *)s, n); }

static void test_base_utf8_accepts_well_formed_text(void **state) {
  (void)state;
  assert_int_equal(utf8("", 0), 1);
  assert_int_equal(dbx_utf8_valid(NULL, 0), 1);
  assert_int_equal(utf8("plain ascii", 11), 1);
  assert_int_equal(utf8("\0", 1), 1);                   /* NUL is a code point */
  assert_int_equal(utf8("\xc2\x80", 2), 1);             /* U+0080, first 2-byte */
  assert_int_equal(utf8("caf\xc3\xa9", 5), 1);          /* U+00E9 */
  assert_int_equal(utf8("\xe0\xa0\x80", 3), 1);         /* U+0800, first 3-byte */
  assert_int_equal(utf8("\xed\x9f\xbf", 3), 1);         /* U+D7FF, before surrogates */
  assert_int_equal(utf8("\xee\x80\x80", 3), 1);         /* U+E000, after them */
  assert_int_equal(utf8("\xef\xbf\xbf", 3), 1);         /* U+FFFF */
  assert_int_equal(utf8("\xf0\x90\x80\x80", 4), 1);     /* U+10000, first 4-byte */
  assert_int_equal(utf8("\xf0\x9f\x98\x80", 4), 1);     /* U+1F600 */
  assert_int_equal(utf8("\xf4\x8f\xbf\xbf", 4), 1);     /* U+10FFFF, the last */
}

static void test_base_utf8_rejects_ill_formed_text(void **state) {
  (void)state;
  /* overlong forms */
  assert_int_equal(utf8("\xc0\x80", 2), 0);
  assert_int_equal(utf8("\xc1\xbf", 2), 0);
  assert_int_equal(utf8("\xe0\x80\x80", 3), 0);
  assert_int_equal(utf8("\xe0\x9f\xbf", 3), 0);
  assert_int_equal(utf8("\xf0\x80\x80\x80", 4), 0);
  assert_int_equal(utf8("\xf0\x8f\xbf\xbf", 4), 0);
  /* surrogates */
  assert_int_equal(utf8("\xed\xa0\x80", 3), 0);
  assert_int_equal(utf8("\xed\xbf\xbf", 3), 0);
  assert_int_equal(utf8("\xed\xa0\xbd\xed\xb8\x80", 6), 0); /* CESU-8 pair */
  /* past U+10FFFF */
  assert_int_equal(utf8("\xf4\x90\x80\x80", 4), 0);
  assert_int_equal(utf8("\xf5\x80\x80\x80", 4), 0);
  assert_int_equal(utf8("\xf8\x88\x80\x80\x80", 5), 0);
  assert_int_equal(utf8("\xff", 1), 0);
  /* truncated, in the middle and at the end */
  assert_int_equal(utf8("\xc3", 1), 0);
  assert_int_equal(utf8("a\xe2\x82", 3), 0);
  assert_int_equal(utf8("\xf0\x9f\x98", 3), 0);
  assert_int_equal(utf8("\xf0\x9f\x98" "a", 4), 0);
  assert_int_equal(utf8("caf\xc3\xa9", 4), 0); /* n cuts the sequence */
  /* stray continuation bytes */
  assert_int_equal(utf8("\x80", 1), 0);
  assert_int_equal(utf8("a\xbf" "b", 3), 0);
  assert_int_equal(utf8("\xe2\x28\xa1", 3), 0);
}

/* repair(s, n) equals want (NUL-free text), and the result is valid */
static void check_repair(const char *s, size_t n, const char *want) {
  size_t len = 12345;
  char *r = dbx_utf8_repair(s, n, &len);
  assert_non_null(r);
  assert_int_equal(len, strlen(want));
  assert_string_equal(r, want);
  assert_int_equal(dbx_utf8_valid((const uint8_t *)r, len), 1);
  free(r);
}

#define FFFD "\xef\xbf\xbd"
static void test_base_utf8_repair_replaces_each_ill_formed_part(void **state) {
  (void)state;
  check_repair("", 0, "");
  check_repair(NULL, 0, "");
  check_repair("caf\xc3\xa9 \xf0\x9f\x98\x80", 10, "caf\xc3\xa9 \xf0\x9f\x98\x80"); /* well-formed: unchanged */
  check_repair("caf\xe9!", 5, "caf" FFFD "!");              /* a Latin-1 byte */
  check_repair("\xe9\xe8", 2, FFFD FFFD);                   /* one each */
  check_repair("a\xe2\x82" "b", 4, "a" FFFD "b");           /* truncated: one for the whole part */
  check_repair("\xf0\x9f\x98", 3, FFFD);                    /* truncated at the end */
  check_repair("\xc0\x80", 2, FFFD FFFD);                   /* overlong: C0 never starts a sequence */
  check_repair("\xe0\x80\x80", 3, FFFD FFFD FFFD);          /* overlong 3-byte: E0 80 is not a prefix */
  check_repair("\xed\xa0\x80x", 4, FFFD FFFD FFFD "x");     /* a surrogate */
  check_repair("\xf4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD); /* past U+10FFFF */
  check_repair("\xff\xfe", 2, FFFD FFFD);
  check_repair("\x80\xbf", 2, FFFD FFFD);                   /* stray continuation bytes */
  check_repair("\xe2\x82\xac\xe2\x82", 5, "\xe2\x82\xac" FFFD);
  /* NUL bytes are kept */
  size_t len = 0;
  char *r = dbx_utf8_repair("a\0\xe9", 3, &len);
  assert_non_null(r);
  assert_int_equal(len, 5);
  assert_memory_equal(r, "a\0" FFFD, 5);
  free(r);
  /* out_len may be NULL */
  r = dbx_utf8_repair("\xe9", 1, NULL);
  assert_non_null(r);
  assert_string_equal(r, FFFD);
  free(r);
}
#undef FFFD

static void expect_b64(const char *plain, const char *text) {
  char *e = dbx_base64_encode((const uint8_t *)plain, strlen(plain));
  assert_non_null(e);
  assert_string_equal(e, text);
  free(e);
  uint8_t *d = NULL;
  size_t n = 99;
  assert_int_equal(dbx_base64_decode(text, strlen(text), &d, &n), DBX_OK);
  assert_int_equal(n, strlen(plain));
  assert_memory_equal(d, plain, n);
  free(d);
}

static void expect_b64_bad(const char *text) {
  uint8_t *d = (uint8_t *)1;
  size_t n = 99;
  assert_int_equal(dbx_base64_decode(text, strlen(text), &d, &n), DBX_EINVAL);
  assert_null(d);
  assert_int_equal(n, 0);
}

static void test_base_base64_rfc4648_vectors(void **state) {
  (void)state;
  /* RFC 4648 section 10 */
  expect_b64("", "");
  expect_b64("f", "Zg==");
  expect_b64("fo", "Zm8=");
  expect_b64("foo", "Zm9v");
  expect_b64("foob", "Zm9vYg==");
  expect_b64("fooba", "Zm9vYmE=");
  expect_b64("foobar", "Zm9vYmFy");
  /* both extra characters of the standard alphabet */
  uint8_t hi[3] = {0xfb, 0xff, 0xbf};
  char *e = dbx_base64_encode(hi, 3);
  assert_string_equal(e, "+/+/");
  free(e);
  /* every byte value round-trips */
  uint8_t all[256];
  for (int i = 0; i < 256; i++) all[i] = (uint8_t)i;
  e = dbx_base64_encode(all, sizeof all);
  assert_int_equal(strlen(e), 344);
  uint8_t *d = NULL;
  size_t n = 0;
  assert_int_equal(dbx_base64_decode(e, strlen(e), &d, &n), DBX_OK);
  assert_int_equal(n, 256);
  assert_memory_equal(d, all, 256);
  free(d);
  free(e);
}

static void test_base_base64_rejects_malformed_text(void **state) {
  (void)state;
  expect_b64_bad("Zg=");          /* not a multiple of 4 */
  expect_b64_bad("Zg");           /* padding required */
  expect_b64_bad("Zg=a");         /* data after '=' */
  expect_b64_bad("Z===");         /* too much padding */
  expect_b64_bad("Zg==Zm9v");     /* padding in the middle */
  expect_b64_bad("Zm9v\nYmFy");   /* whitespace */
  expect_b64_bad("Zm9-");         /* base64url alphabet */
  expect_b64_bad("Zh==");         /* non-zero bits under the padding */
  expect_b64_bad("Zm9=");
  uint8_t *d = NULL;
  size_t n = 0;
  assert_int_equal(dbx_base64_decode("Zm9v\0Zm9v", 8, &d, &n), DBX_EINVAL); /* NUL inside */
}

/* ------------------------------------------------------------ digests, ids */

static void expect_sha256(const void *p, size_t n, const char *hex) {
  char out[DBX_SHA256_HEX_LEN + 1];
  assert_int_equal(dbx_sha256_hex(p, n, out), DBX_OK);
  assert_string_equal(out, hex);
}

static void test_base_sha256_known_vectors(void **state) {
  (void)state;
  /* FIPS 180-4 examples (NIST CSRC) */
  expect_sha256(NULL, 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  expect_sha256("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  expect_sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
                "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  char *m = malloc(1000000);
  memset(m, 'a', 1000000);
  expect_sha256(m, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  free(m);
  uint8_t raw[DBX_SHA256_LEN];
  assert_int_equal(dbx_sha256("abc", 3, raw), DBX_OK);
  assert_int_equal(raw[0], 0xba);
  assert_int_equal(raw[31], 0xad);
}

static void test_base_fnv1a64_known_vectors(void **state) {
  (void)state;
  /* the reference values of the FNV authors' test suite */
  assert_true(dbx_fnv1a64(DBX_FNV1A64_OFFSET, "", 0) == 0xcbf29ce484222325ULL);
  assert_true(dbx_fnv1a64(DBX_FNV1A64_OFFSET, "a", 1) == 0xaf63dc4c8601ec8cULL);
  assert_true(dbx_fnv1a64(DBX_FNV1A64_OFFSET, "foobar", 6) == 0x85944171f73967e8ULL);
  /* continuing a hash equals hashing the concatenation */
  assert_true(dbx_fnv1a64(dbx_fnv1a64(DBX_FNV1A64_OFFSET, "foo", 3), "bar", 3) ==
              0x85944171f73967e8ULL);
}

static void test_base_uuid_v4_shape_and_uniqueness(void **state) {
  (void)state;
  char a[DBX_UUID_LEN + 1], b[DBX_UUID_LEN + 1];
  assert_int_equal(dbx_uuid_v4(a), DBX_OK);
  assert_int_equal(dbx_uuid_v4(b), DBX_OK);
  assert_int_equal(strlen(a), 36);
  assert_string_not_equal(a, b);
  for (int i = 0; i < 36; i++) {
    if (i == 8 || i == 13 || i == 18 || i == 23)
      assert_int_equal(a[i], '-');
    else
      assert_non_null(strchr("0123456789abcdef", a[i]));
  }
  assert_int_equal(a[14], '4');              /* version */
  assert_non_null(strchr("89ab", a[19]));    /* variant 10xx */
}

/* ------------------------------------------------------------ protos/pb.h */

static void test_base_pb_durations_and_timestamps(void **state) {
  (void)state;
  Duration d;
  dbx_pb_duration_init_ms(&d, 90061);
  assert_int_equal(d.seconds, 90);
  assert_int_equal(d.nanos, 61000000);
  assert_int_equal(dbx_pb_duration_ms(&d), 90061);
  assert_int_equal(dbx_pb_duration_ns(&d), 90061000000LL);
  assert_int_equal(d.base.descriptor, &Duration__D);
  dbx_pb_duration_init_ms(&d, -1500); /* same sign in both fields */
  assert_int_equal(d.seconds, -1);
  assert_int_equal(d.nanos, -500000000);
  assert_int_equal(dbx_pb_duration_ms(&d), -1);
  assert_int_equal(dbx_pb_duration_ms(NULL), 0);
  d.seconds = INT64_MAX;
  d.nanos = 0;
  assert_int_equal(dbx_pb_duration_ms(&d), INT64_MAX / 2);
  assert_int_equal(dbx_pb_duration_ns(&d), INT64_MAX / 2);

  Timestamp t;
  dbx_pb_timestamp_init_ns(&t, 1700000000123456789LL);
  assert_int_equal(t.seconds, 1700000000);
  assert_int_equal(t.nanos, 123456789);
  assert_int_equal(dbx_pb_timestamp_ns(&t), 1700000000123456789LL);
  assert_int_equal(dbx_pb_timestamp_ns(NULL), 0);
}

typedef struct {
  uint8_t *bytes;
  size_t len;
} pb_case;

static dbx_err unpack_op(void *ud) {
  pb_case *c = ud;
  WorkflowExecution *m = (WorkflowExecution *)dbx_pb_unpack(&WorkflowExecution__D, c->bytes, c->len);
  if (m == NULL) return DBX_ENOMEM;
  dbx_err rc = strcmp(m->workflow_id, "wf-1") == 0 && strcmp(m->run_id, "r-2") == 0 ? DBX_OK : DBX_EIO;
  protobuf_c_message_free_unpacked(&m->base, dbx_pb_allocator());
  return rc;
}

static dbx_err pack_op(void *ud) {
  pb_case *c = ud;
  WorkflowExecution m = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  m.workflow_id = "wf-1";
  m.run_id = "r-2";
  size_t n = 0;
  uint8_t *b = dbx_pb_pack(&m.base, &n);
  if (b == NULL) return DBX_ENOMEM;
  dbx_err rc = n == c->len && memcmp(b, c->bytes, n) == 0 ? DBX_OK : DBX_EIO;
  free(b);
  return rc;
}

static void test_base_pb_allocator_counts_protobuf_allocations(void **state) {
  (void)state;
  WorkflowExecution m = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  m.workflow_id = "wf-1";
  m.run_id = "r-2";
  pb_case c = {NULL, 0};
  c.bytes = dbx_pb_pack(&m.base, &c.len);
  assert_non_null(c.bytes);
  /* field 1 "wf-1", field 2 "r-2" */
  assert_int_equal(c.len, 11);
  assert_memory_equal(c.bytes, "\x0a\x04wf-1\x12\x03r-2", 11);
  /* unpack allocates the message and its two strings through the hook */
  assert_true(sweep_allocations(unpack_op, &c) >= 3);
  assert_int_equal(sweep_allocations(pack_op, &c), 1);
  assert_null(dbx_pb_unpack(&WorkflowExecution__D, (const uint8_t *)"\x0a\x09wf", 4));
  WorkflowExecution *copy = (WorkflowExecution *)dbx_pb_clone(&m.base);
  assert_non_null(copy);
  assert_ptr_not_equal(copy->workflow_id, m.workflow_id);
  assert_string_equal(copy->workflow_id, "wf-1");
  assert_string_equal(copy->run_id, "r-2");
  protobuf_c_message_free_unpacked(&copy->base, NULL); /* plain free works too */
  assert_null(dbx_pb_clone(NULL));
  free(c.bytes);
}

static dbx_err b64_op(void *ud) {
  uint8_t *d = NULL;
  size_t n = 0;
  dbx_err rc = dbx_base64_decode(ud, strlen(ud), &d, &n);
  free(d);
  if (rc != DBX_OK) return rc;
  char *e = dbx_base64_encode((const uint8_t *)"foobar", 6);
  if (e == NULL) return DBX_ENOMEM;
  free(e);
  return DBX_OK;
}

static dbx_err mkdirs_op(void *ud) { return dbx_fs_mkdirs(ud, 0700); }

static void test_base_helpers_report_each_allocation_failure(void **state) {
  (void)state;
  assert_int_equal(sweep_allocations(b64_op, "Zm9vYmFy"), 2);
  char *dir = dbx_test_tmpdir("tbase");
  char *deep = dbx_asprintf("%s/p/q", dir);
  assert_int_equal(sweep_allocations(mkdirs_op, deep), 1);
  assert_true(is_dir(deep));
  free(deep);
  dbx_test_rmrf(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_base_strerror_names_every_code),
      cmocka_unit_test(test_base_log_level_parse),
      cmocka_unit_test(test_base_asprintf_and_strndup),
      cmocka_unit_test(test_base_clocks_advance),
      cmocka_unit_test(test_base_alloc_fails_exactly_the_nth),
      cmocka_unit_test(test_base_alloc_realloc_failure_keeps_the_block),
      cmocka_unit_test(test_base_alloc_string_helpers_go_through_the_hook),
      cmocka_unit_test(test_base_fs_read_all_reads_bytes_and_terminates),
      cmocka_unit_test(test_base_fs_read_all_survives_each_allocation_failing),
      cmocka_unit_test(test_base_fs_mkdirs_makes_each_level),
      cmocka_unit_test(test_base_fs_remove_tree_removes_links_not_targets),
      cmocka_unit_test(test_base_fs_remove_tree_deeper_than_path_max),
      cmocka_unit_test(test_base_utf8_accepts_well_formed_text),
      cmocka_unit_test(test_base_utf8_rejects_ill_formed_text),
      cmocka_unit_test(test_base_utf8_repair_replaces_each_ill_formed_part),
      cmocka_unit_test(test_base_base64_rfc4648_vectors),
      cmocka_unit_test(test_base_base64_rejects_malformed_text),
      cmocka_unit_test(test_base_sha256_known_vectors),
      cmocka_unit_test(test_base_fnv1a64_known_vectors),
      cmocka_unit_test(test_base_uuid_v4_shape_and_uniqueness),
      cmocka_unit_test(test_base_pb_durations_and_timestamps),
      cmocka_unit_test(test_base_pb_allocator_counts_protobuf_allocations),
      cmocka_unit_test(test_base_helpers_report_each_allocation_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
