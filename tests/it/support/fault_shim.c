/*
 * A fault-injection shim for tests, loaded into the real pi-sessiond binary with LD_PRELOAD (compiled at test
 * time by tests/it/support/faults.rs). It wraps write, fsync and fdatasync for file descriptors whose path
 * contains $PI_FAULT_MATCH, and does what the flag files in the directory $PI_FAULT_CONTROL say, checked at every
 * call so a test can switch a fault on and off while the process runs:
 *
 *   fsync-eio     fsync and fdatasync fail with EIO (a dying disk, or a full thin-provisioned one).
 *   write-enospc  a write takes half its bytes, the next one fails with ENOSPC (what a disk filling up does).
 *   inject        before the next write to a matching file, the flag file's bytes are appended to that file
 *                 through a descriptor of its own, and the flag is removed: another writer (pi) getting in
 *                 between a check of the file and the write.
 *   stall-tmp     a write to a matching file whose name ends in ".tmp" never returns (until the process is
 *                 killed): a rewrite caught in the middle.
 *
 * Every fsync and fdatasync of a matching file also appends one byte to $PI_FAULT_CONTROL/fsyncs, so a test can
 * count them.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef int (*sync_fn)(int);

static write_fn real_write_fn(void) {
	static write_fn real;
	if (!real) real = (write_fn)dlsym(RTLD_NEXT, "write");
	return real;
}

/* The path of fd, when it contains the pattern. */
static int matching_path(int fd, char *out, size_t size) {
	const char *pattern = getenv("PI_FAULT_MATCH");
	if (!pattern || !*pattern) return 0;
	char link[64];
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, out, size - 1);
	if (n < 0) return 0;
	out[n] = 0;
	return strstr(out, pattern) != NULL;
}

static void flag_path(const char *name, char *out, size_t size) {
	const char *dir = getenv("PI_FAULT_CONTROL");
	snprintf(out, size, "%s/%s", dir ? dir : "/nonexistent", name);
}

static int flag(const char *name) {
	char path[4096];
	flag_path(name, path, sizeof path);
	return access(path, F_OK) == 0;
}

static int ends_with(const char *s, const char *suffix) {
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Appends the inject flag's bytes to `target` (once), as another process would. */
static void inject(const char *target) {
	char path[4096];
	flag_path("inject", path, sizeof path);
	int in = open(path, O_RDONLY);
	if (in < 0) return;
	char bytes[65536];
	ssize_t n = read(in, bytes, sizeof bytes);
	close(in);
	unlink(path);
	if (n <= 0) return;
	int out = open(target, O_WRONLY | O_APPEND);
	if (out < 0) return;
	real_write_fn()(out, bytes, (size_t)n);
	close(out);
}

static __thread int half_written;

ssize_t write(int fd, const void *buf, size_t count) {
	char target[4096];
	if (count > 0 && matching_path(fd, target, sizeof target)) {
		if (flag("stall-tmp") && ends_with(target, ".tmp")) {
			for (;;) pause();
		}
		if (!ends_with(target, ".tmp")) inject(target);
		if (flag("write-enospc")) {
			if (!half_written && count > 1) {
				half_written = 1;
				return real_write_fn()(fd, buf, count / 2);
			}
			half_written = 0;
			errno = ENOSPC;
			return -1;
		}
	}
	return real_write_fn()(fd, buf, count);
}

static int failing_sync(int fd, const char *name) {
	static sync_fn real_fsync, real_fdatasync;
	sync_fn *real = strcmp(name, "fsync") == 0 ? &real_fsync : &real_fdatasync;
	if (!*real) *real = (sync_fn)dlsym(RTLD_NEXT, name);
	char target[4096];
	if (matching_path(fd, target, sizeof target)) {
		char count[4096];
		flag_path("fsyncs", count, sizeof count);
		int c = open(count, O_WRONLY | O_APPEND | O_CREAT, 0600);
		if (c >= 0) {
			real_write_fn()(c, "s", 1);
			close(c);
		}
		if (flag("fsync-eio")) {
			errno = EIO;
			return -1;
		}
	}
	return (*real)(fd);
}

int fsync(int fd) { return failing_sync(fd, "fsync"); }

int fdatasync(int fd) { return failing_sync(fd, "fdatasync"); }
