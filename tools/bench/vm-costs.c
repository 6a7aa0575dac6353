/* vm-costs.c - what a machine charges for the operations a user-space NVMe/TCP target pays
 * per I/O and a kernel target does not: a system call, a clock reading, a non-blocking recv,
 * an epoll_wait(0), a copy of 128 KiB (what sendmsg does with each 128 KiB C2HData it copies
 * into the socket, where nvmet-tcp sends the pages by reference) and a zeroing of 128 KiB
 * (what init_on_alloc costs for each fresh page: both targets pay it, for socket pages or
 * data pages),
 * and a wake-up of another task (a pipe round trip), between two threads of one process and
 * between two processes (which also switches the address space), on one CPU and across two. Built and run by tools/bench/vm-costs, here and in the tools/rxe-vm VM.
 * Prints one line per measurement: name, nanoseconds per operation (round trip for the pipe).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static void pin(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	if (sched_setaffinity(0, sizeof s, &s) != 0) {
		perror("sched_setaffinity");
		exit(1);
	}
}

static int ping[2], pong[2], rounds, peer_cpu, cpu_a, cpu_b = -1;

static void *echo(void *unused)
{
	char c;
	(void)unused;
	pin(peer_cpu);
	for (int i = 0; i < rounds; i++)
		if (read(ping[0], &c, 1) != 1 || write(pong[1], &c, 1) != 1)
			exit(1);
	return NULL;
}

static void round_trip(const char *name, int processes, int cpu)
{
	pthread_t t;
	pid_t p = 0;
	char c = 'x';
	double t0, t1;

	if (pipe(ping) || pipe(pong)) {
		perror("pipe");
		exit(1);
	}
	peer_cpu = cpu;
	if (processes) {
		p = fork();
		if (p == 0) {
			echo(NULL);
			_exit(0);
		}
	} else if (pthread_create(&t, NULL, echo, NULL)) {
		exit(1);
	}
	pin(cpu_a);
	t0 = now_ns();
	for (int i = 0; i < rounds; i++)
		if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
			exit(1);
	t1 = now_ns();
	if (processes)
		waitpid(p, NULL, 0);
	else
		pthread_join(t, NULL);
	printf("%s %.0f\n", name, (t1 - t0) / rounds);
	close(ping[0]);
	close(ping[1]);
	close(pong[0]);
	close(pong[1]);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100000, sv[2], ep;
	struct epoll_event ev = { .events = EPOLLIN };
	struct timespec ts;
	char buf[64];
	double t0;

	if (n < 100)
		n = 100;
	{
		/* the first two CPUs this process may run on (a cpuset or taskset may leave out 0) */
		cpu_set_t s;
		if (sched_getaffinity(0, sizeof s, &s)) {
			perror("sched_getaffinity");
			return 1;
		}
		cpu_a = -1;
		for (int c = 0; c < CPU_SETSIZE; c++) {
			if (!CPU_ISSET(c, &s))
				continue;
			if (cpu_a < 0) {
				cpu_a = c;
			} else {
				cpu_b = c;
				break;
			}
		}
	}
	pin(cpu_a);
	t0 = now_ns();
	for (int i = 0; i < n; i++)
		syscall(SYS_getppid);
	printf("syscall %.0f\n", (now_ns() - t0) / n);

	t0 = now_ns();
	for (int i = 0; i < n; i++)
		clock_gettime(CLOCK_MONOTONIC, &ts);
	printf("clock_gettime %.0f\n", (now_ns() - t0) / n);

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv)) {
		perror("socketpair");
		return 1;
	}
	t0 = now_ns();
	for (int i = 0; i < n; i++)
		if (recv(sv[0], buf, sizeof buf, 0) != -1 || errno != EAGAIN)
			return 1;
	printf("recv_eagain %.0f\n", (now_ns() - t0) / n);

	ep = epoll_create1(0);
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, sv[0], &ev)) {
		perror("epoll");
		return 1;
	}
	t0 = now_ns();
	for (int i = 0; i < n; i++)
		epoll_wait(ep, &ev, 1, 0);
	printf("epoll_wait_0 %.0f\n", (now_ns() - t0) / n);

	{
		enum { COPY = 128 << 10 };
		static char src[COPY], dst[COPY];
		int copies = n / 100;

		/* rep movsb / rep stosb: how the kernel copies user data into socket pages and
		 * zeroes pages on this CPU (copy_user_enhanced_fast_string, clear_page_erms) */
		memset(src, 1, sizeof src);
		t0 = now_ns();
		for (int i = 0; i < copies; i++) {
			void *d = dst, *s = src;
			size_t c = COPY;
			__asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(c) : : "memory");
		}
		printf("copy_128k %.0f\n", (now_ns() - t0) / copies);
		t0 = now_ns();
		for (int i = 0; i < copies; i++) {
			void *d = dst;
			size_t c = COPY;
			__asm__ volatile("rep stosb" : "+D"(d), "+c"(c) : "a"(0) : "memory");
		}
		printf("zero_128k %.0f\n", (now_ns() - t0) / copies);
	}

	rounds = n / 10;
	round_trip("wake_threads_same_cpu", 0, cpu_a);
	round_trip("wake_processes_same_cpu", 1, cpu_a);
	if (cpu_b >= 0) {
		round_trip("wake_threads_other_cpu", 0, cpu_b);
		round_trip("wake_processes_other_cpu", 1, cpu_b);
	}
	return 0;
}
