/*
 * podward e2e pause: the sandbox's first process. It holds the pod's namespaces, reaps any
 * child re-parented to it (it is PID 1 of the pod's PID namespace when one is shared) and exits
 * cleanly on SIGTERM/SIGINT, like Kubernetes' own pause. Built with `gcc -static -Os`.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_term(int sig) {
    (void)sig;
    stop = 1;
}

static void on_child(int sig) {
    (void)sig;
    /* Reap every exited child; never leave zombies in the pod. */
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(int argc, char **argv) {
    struct sigaction term, chld;
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        puts("podward-e2e pause");
        return 0;
    }
    memset(&term, 0, sizeof term);
    term.sa_handler = on_term;
    sigaction(SIGTERM, &term, NULL);
    sigaction(SIGINT, &term, NULL);
    memset(&chld, 0, sizeof chld);
    chld.sa_handler = on_child;
    chld.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    sigaction(SIGCHLD, &chld, NULL);
    while (!stop) {
        pause();
    }
    return 0;
}
