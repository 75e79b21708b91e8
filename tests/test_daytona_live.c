/* Opt-in live test of the Daytona driver against Daytona itself: runs only
 * when DAYTONA_API_KEY is set (DAYTONA_API_URL and DAYTONA_TARGET as the
 * driver reads them). Without the key it exits 77, which CTest reports as
 * skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt), never as passed.
 * With it: create a sandbox under a fresh name, run a command, write and
 * read a file, checkpoint it (the snapshot confirmed active), delete the
 * snapshot and the sandbox. Costs a few cents of sandbox time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "activities/daytona.h"
#include "activities/driver.h"
#include "base/util.h"

#define SKIP_CODE 77

static void test_daytona_live_create_exec_snapshot_delete(void **state) {
  (void)state;
  dbx_daytona *d = NULL;
  const char *why = NULL;
  dbx_daytona_opts o = {.state_wait_ms = 180000, .snapshot_wait_ms = 15 * 60000};
  assert_int_equal(dbx_daytona_open(&o, &d, &why), DBX_OK);
  dbx_driver *drv = dbx_daytona_driver(d);
  char uuid[DBX_UUID_LEN + 1];
  assert_int_equal(dbx_uuid_v4(uuid), DBX_OK);
  char name[64], snap[64];
  snprintf(name, sizeof name, "dbx-live-%.8s", uuid);
  snprintf(snap, sizeof snap, "dbx-live-snap-%.8s", uuid);
  dbx_drv_label l = {"durabox.test", "live"};
  dbx_drv_create_opts co = {.labels = &l, .nlabels = 1};
  dbx_drv_err rc = drv->ops->create(drv->self, name, &co, NULL);
  if (rc != DBX_DRV_OK) fail_msg("create: %s", drv->ops->errmsg(drv->self));
  dbx_drv_exec_opts eo = {.command = "echo live-ok; echo to-err >&2", .timeout_ms = 60000};
  assert_int_equal(drv->ops->exec_start(drv->self, name, "live-c1", &eo, NULL), DBX_DRV_OK);
  dbx_drv_cmd_status st = {0};
  for (int i = 0; i < 600 && st.state != DBX_DRV_CMD_FINISHED; i++) {
    assert_int_equal(drv->ops->exec_poll(drv->self, name, "live-c1", &st), DBX_DRV_OK);
    struct timespec ts = {0, 200 * 1000000};
    if (st.state != DBX_DRV_CMD_FINISHED) nanosleep(&ts, NULL);
  }
  dbx_drv_exec_result r;
  assert_int_equal(drv->ops->exec_result(drv->self, name, "live-c1", &r), DBX_DRV_OK);
  assert_int_equal(r.exit_code, 0);
  assert_string_equal((char *)r.stdout_buf, "live-ok\n");
  assert_string_equal((char *)r.stderr_buf, "to-err\n");
  dbx_drv_exec_result_cleanup(&r);
  assert_int_equal(drv->ops->file_write(drv->self, name, "live/f.bin", "\x00\xff\x01", 3), DBX_DRV_OK);
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(drv->ops->file_read(drv->self, name, "live/f.bin", 0, &data, &len), DBX_DRV_OK);
  assert_int_equal(len, 3);
  assert_memory_equal(data, "\x00\xff\x01", 3);
  free(data);
  char *ref = NULL;
  rc = drv->ops->checkpoint(drv->self, name, snap, &ref);
  if (rc != DBX_DRV_OK) fail_msg("checkpoint: %s", drv->ops->errmsg(drv->self));
  assert_int_equal(drv->ops->snapshot_delete(drv->self, ref), DBX_DRV_OK);
  free(ref);
  assert_int_equal(drv->ops->del(drv->self, name), DBX_DRV_OK);
  dbx_daytona_close(d);
}

int main(void) {
  const char *key = getenv("DAYTONA_API_KEY");
  if (key == NULL || *key == '\0') {
    printf("test_daytona_live: DAYTONA_API_KEY is not set: not run (skipped)\n");
    return SKIP_CODE;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_daytona_live_create_exec_snapshot_delete),
  };
  return cmocka_run_group_tests_name("daytona_live", tests, NULL, NULL);
}
