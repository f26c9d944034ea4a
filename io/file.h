/* file: a whole small file read into memory, for the inputs zinf reads once (a DeepSpeed config,
 * a hostfile). */
#ifndef ZINF_FILE_H
#define ZINF_FILE_H

#include <stddef.h>

struct stat;

/* Read all of path into a malloc'd buffer with a NUL after its *len bytes. An error names the
 * file as "WHAT PATH: cause" (what may be NULL: "PATH: cause"). Only a regular file is read (see
 * zinf_open_regular): a FIFO would block and /dev/zero never end. */
int zinf_read_file(const char *what, const char *path, char **buf, size_t *len);
/* Open path read-only, without blocking on a FIFO, and refuse what is not a regular file with
 * "WHAT PATH: is a directory, not a regular file" (a FIFO, a character device, ...): -EISDIR for
 * a directory, ZINF_EINVAL for the rest. *fd is blocking again; *st its fstat. */
int zinf_open_regular(const char *what, const char *path, int *fd, struct stat *st);
/* Create directory path and the ones above it that are missing (mode 0755); an error names the
 * directory that could not be made, or path when it is something other than a directory. */
int zinf_mkdir_p(const char *path);
/* The same, and *made: the length of the shortest prefix of path it created (0: every directory
 * was there), for zinf_rmdir_made. A failure takes back what it made. */
int zinf_mkdir_p_made(const char *path, size_t *made);
/* Take back what zinf_mkdir_p_made(path, &made) made: rmdir path and the directories above it
 * down to the made-th byte, deepest first, stopping at the first that is not empty (something was
 * put there meanwhile); what existed before is never touched. */
void zinf_rmdir_made(const char *path, size_t made);
/* 0 where path is a regular file or does not exist (the caller's own open then says so); else
 * "WHAT PATH: is a FIFO, not a regular file" (what may be NULL), without opening it: for inputs
 * that a library opens by name (HDF5, jansson), where a FIFO would block the open for good. */
int zinf_refuse_irregular(const char *what, const char *path);
/* 0 where the directory of a path prefix (what precedes its last '/', or ".") is a directory;
 * else one line naming it (WHAT PREFIX: ...), before any file is made there. */
int zinf_prefix_dir(const char *what, const char *prefix);
/* "a directory", "a FIFO", "a character device", ... for an st_mode */
const char *zinf_file_kind(unsigned mode);

#endif
