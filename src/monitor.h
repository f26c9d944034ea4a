/* monitor: DeepSpeed's "tensorboard" and "csv_monitor" blocks, written by rank 0.
 * Owns: TensorBoard event files written by hand (TFRecord framing with masked CRC-32C, Event and
 * Summary protobuf messages holding scalars; no library), and DeepSpeed's CSV files, one per tag
 * ("step,NAME" then "STEP,VALUE" lines). Both take the same events: a tag, a value and a step. It
 * knows no models and no MPI; the caller makes the directories. */
#ifndef ZINF_MONITOR_H
#define ZINF_MONITOR_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C (Castagnoli) of n bytes, and TFRecord's mask of it: ((crc >> 15) | (crc << 17)) +
 * 0xa282ead8 */
uint32_t zinf_crc32c(const void *p, size_t n);
uint32_t zinf_crc32c_masked(const void *p, size_t n);

typedef struct zinf_monitor zinf_monitor;

/* Open the writers whose directory is not NULL: tb_dir gets a new event file
 * (events.out.tfevents.TIME.HOST.PID, its first record the file_version event); csv_dir gets its
 * CSV files as events arrive, appended to. *out is NULL when both are NULL. */
int zinf_monitor_open(zinf_monitor **out, const char *tb_dir, const char *csv_dir);
/* One scalar event of every open writer (tag e.g. "Train/Samples/train_loss"), stamped with the
 * wall clock. The TensorBoard value is a float (simple_value); the CSV one is written as the
 * shortest text that reads back as the same double. Each record is flushed. */
int zinf_monitor_scalar(zinf_monitor *m, const char *tag, double value, int64_t step);
/* Close every file: 0, or the first failed write or close. */
int zinf_monitor_close(zinf_monitor *m);

#endif
