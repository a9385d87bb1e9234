/* Ours (not xfstests): stands in for autoconf's config.h to build fsx standalone on Linux/glibc. */
#define HAVE_ASSERT_H 1
#define HAVE_DIRENT_H 1
#define HAVE_ERRNO_H 1
#define HAVE_ERR_H 1
#define HAVE_LIBGEN_H 1
#define HAVE_LINUX_FALLOC_H 1
#define HAVE_MALLOC_H 1
#define HAVE_STDLIB_H 1
#define HAVE_STRINGS_H 1
#define HAVE_STRING_H 1
#define HAVE_SYS_FCNTL_H 1
#define HAVE_SYS_IOCTL_H 1
#define HAVE_SYS_MMAN_H 1
#define HAVE_SYS_PARAM_H 1
#define HAVE_SYS_STATVFS_H 1
#define HAVE_SYS_STAT_H 1
#define HAVE_SYS_TIME_H 1
#define HAVE_SYS_TYPES_H 1
#define HAVE_SYS_WAIT_H 1
#define HAVE_TIME_H 1
#define HAVE_UNISTD_H 1
#define HAVE_WAIT_H 1
#define HAVE_COPY_FILE_RANGE 1
/* xfstests gets these through <xfs/xfs.h> (FICLONERANGE, FIDEDUPERANGE) and its build flags. */
#include <getopt.h>
#include <linux/fs.h>
