/* zinf-launch's resource pool and mpirun command against DeepSpeed's documented launcher
 * behaviour: the hostfile grammar of its runner, the include/exclude examples of its docstring
 * ("worker-0@worker-1:0,2" keeps all of worker-0 and slots 0 and 2 of worker-1; excluding
 * "worker-1:0" keeps the rest), --num_nodes / --num_gpus taking the first hosts and slots, and
 * include/exclude being refused beside them. */
#include <stdlib.h>
#include <string.h>

#include "../../src/err.h"
#include "../../src/launch.h"
#include "check.h"

static const char *const HOSTFILE = "# two workers\n"
                                    "worker-0 slots=4\n"
                                    "\n"
                                    "   worker-1   slots=4   # the second\n"
                                    "worker-2 slots=2\n";

/* the chosen slots of host i as "0,1,2" */
static const char *slots_of(const zinf_launch_pool *p, int i)
{
    static char buf[256];
    size_t o = 0;
    buf[0] = 0;
    for (int s = 0; s < p->h[i].n; s++) o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%d", s ? "," : "", p->h[i].slot[s]);
    return buf;
}

static int parse(zinf_launch_pool *p, const char *text) { return zinf_launch_parse_hostfile(text, "hf", p, NULL); }

static void expect_err(int rc, const char *want, const char *what)
{
    CHECK(rc != 0, "%s: expected an error", what);
    CHECK(rc == 0 || strstr(zinf_errmsg(), want), "%s: message '%s' lacks '%s'", what, zinf_errmsg(), want);
}

static void test_hostfile(void)
{
    zinf_launch_pool p;
    CHECK(parse(&p, HOSTFILE) == 0, "%s", zinf_errmsg());
    CHECK(p.n == 3, "hosts %d", p.n);
    CHECK(!strcmp(p.h[0].name, "worker-0") && !strcmp(p.h[1].name, "worker-1") && !strcmp(p.h[2].name, "worker-2"),
          "names");
    CHECK(p.h[0].nslots == 4 && p.h[1].nslots == 4 && p.h[2].nslots == 2, "slots");
    CHECK(!strcmp(slots_of(&p, 2), "0,1"), "all slots chosen: %s", slots_of(&p, 2));
    zinf_launch_pool_free(&p);
    /* no newline at the end, CRLF lines */
    CHECK(parse(&p, "a slots=1\r\nb slots=2") == 0 && p.n == 2 && p.h[1].nslots == 2, "CRLF / no final newline");
    zinf_launch_pool_free(&p);
    /* a comment from any '#', as OpenMPI reads it: right after the count, or ending a host line */
    CHECK(parse(&p, "a slots=2#two GPUs\nb slots=3\t# three\n#c slots=9\n") == 0 && p.n == 2 &&
              p.h[0].nslots == 2 && p.h[1].nslots == 3,
          "comments: %s", zinf_errmsg());
    zinf_launch_pool_free(&p);
    expect_err(parse(&p, "a#x slots=2\n"), "hf:1: expected 'HOST slots=N', got 'a'", "a comment before slots=");
    /* OpenMPI's max_slots= is named in a note, the comment after it is not */
    char *note = NULL;
    size_t nlen = 0;
    FILE *nf = open_memstream(&note, &nlen);
    CHECK(zinf_launch_parse_hostfile("a slots=2 max_slots=4 # two\nb slots=1#one\n", "hf", &p, nf) == 0 && p.n == 2,
          "max_slots: %s", zinf_errmsg());
    fclose(nf);
    CHECK(!strcmp(note, "zinf-launch: hf:1: 'max_slots=4' after slots= is not used\n"), "note '%s'", note);
    free(note);
    zinf_launch_pool_free(&p);
    /* a UTF-8 byte order mark (Notepad's) before the first host is not part of its name */
    CHECK(parse(&p, "\xEF\xBB\xBFnode1 slots=2\r\nnode2 slots=1\r\n") == 0 && p.n == 2 &&
              !strcmp(p.h[0].name, "node1") && p.h[0].nslots == 2,
          "BOM: %s", p.n ? p.h[0].name : zinf_errmsg());
    zinf_launch_pool_free(&p);

    expect_err(parse(&p, "a slots=2\nb slots=1\na slots=3\n"), "hf:3: host a is listed twice (first on line 1)", "dup");
    /* one node listed under two names: the same name in other case, or two names of this node,
     * where DeepSpeed's text comparison would start two sets of ranks on it */
    expect_err(parse(&p, "Node1 slots=2\nb slots=1\nnode1 slots=2\n"),
               "hf:3: host node1 is host Node1 of line 1 (host names ignore case): list the node once, with all its "
               "slots", "case");
    expect_err(parse(&p, "localhost slots=2\n127.0.0.1 slots=2\n"),
               "hf:2: host 127.0.0.1 is host localhost of line 1 (both name this node): list the node once", "loopback");
    expect_err(parse(&p, "127.0.0.1 slots=2\nLOCALHOST.localdomain slots=2\n"),
               "hf:2: host LOCALHOST.localdomain is host 127.0.0.1 of line 1 (both name this node)", "localdomain");
    expect_err(parse(&p, "127.0.1.1 slots=2\n127.1 slots=2\n"), "hf:2: host 127.1 is host 127.0.1.1 of line 1",
               "127/8 as the resolver reads it");
    CHECK(parse(&p, "localhost slots=2\n128.0.0.1 slots=1\nlocalhost2 slots=1\n127.0.0.1.5 slots=1\n") == 0 && p.n == 4,
          "names that are not this node: %s", zinf_errmsg());
    zinf_launch_pool_free(&p);
    /* user@host: DeepSpeed's --include could not name it (it splits at '@'), OpenMPI's --host refuses it */
    expect_err(parse(&p, "b slots=1\nuser@node-1 slots=2\n"),
               "hf:2: host user@node-1: mpirun's --host takes no user@ (OpenMPI refuses the name), and "
               "--include/--exclude could not name it ('@' separates hosts there, as in DeepSpeed): set the user in "
               "~/.ssh/config (Host node-1, User user) and write the host alone", "user@host");
    expect_err(parse(&p, "a slots=2\nb\n"), "hf:2: expected 'HOST slots=N', got 'b'", "no slots");
    expect_err(parse(&p, "a slot=2\n"), "hf:1: expected 'HOST slots=N'", "slot=");
    expect_err(parse(&p, "a slots=x\n"), "hf:1: host a: slots=x", "slots=x");
    expect_err(parse(&p, "a slots=0\n"), "hf:1: host a: slots=0", "slots=0");
    expect_err(parse(&p, "a slots=-1\n"), "slots=-1", "slots=-1");
    expect_err(parse(&p, "a slots=99999999999\n"), "slots=99999999999", "huge slots");
    /* a sane bound: every slot is a rank on the mpirun line */
    expect_err(parse(&p, "a slots=4\nnode-7 slots=1000000\n"),
               "hf:2: host node-7: slots=1000000: expected a whole number from 1 to 4096", "slots=1000000");
    expect_err(parse(&p, "a slots=4097\n"), "hf:1: host a: slots=4097: expected a whole number from 1 to 4096",
               "slots=4097");
    CHECK(parse(&p, "a slots=4096\n") == 0 && p.h[0].nslots == 4096, "slots=4096: %s", zinf_errmsg());
    zinf_launch_pool_free(&p);
    /* names mpirun's --host NAME:N,... cannot carry: OpenMPI takes no IPv6 address (ompi#6656), and
     * "fe80::1:2" would read as host fe80::1 with 2 slots */
    expect_err(parse(&p, "a slots=1\nfe80::1 slots=2\n"),
               "hf:2: host fe80::1: a ':' (an IPv6 address?) cannot be passed in mpirun's --host NAME:N nor named in "
               "--include HOST:SLOT; give the host's name", "IPv6");
    expect_err(parse(&p, "a,b slots=2\n"), "hf:1: host a,b: a ',' separates hosts in mpirun's --host list", "comma");
    expect_err(parse(&p, "a slots=1\nn\xC3\xB6" "de slots=1\n"),
               "hf:2: host n\xC3\xB6" "de: byte 2 is 0xC3: a host name is printable ASCII", "non-ASCII");
    char longname[320];
    memset(longname, 'x', 256);
    snprintf(longname + 256, sizeof longname - 256, " slots=1\n");
    expect_err(parse(&p, longname),
               "hf:1: host xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...: a name of 256 bytes, at most 255", "long name");
    longname[255] = ' ';
    CHECK(parse(&p, longname) == 0 && strlen(p.h[0].name) == 255, "a 255-byte name: %s", zinf_errmsg());
    zinf_launch_pool_free(&p);
    expect_err(parse(&p, "# nothing\n\n   \n"), "hf: names no hosts", "empty");
    expect_err(parse(&p, ""), "names no hosts", "empty text");
}

static void test_filter(void)
{
    zinf_launch_pool p;
    /* DeepSpeed's docstring example */
    parse(&p, HOSTFILE);
    CHECK(zinf_launch_filter(&p, "worker-0@worker-1:0,2", NULL) == 0, "%s", zinf_errmsg());
    CHECK(!strcmp(slots_of(&p, 0), "0,1,2,3"), "include worker-0: %s", slots_of(&p, 0));
    CHECK(!strcmp(slots_of(&p, 1), "0,2"), "include worker-1:0,2: %s", slots_of(&p, 1));
    CHECK(p.h[2].n == 0, "worker-2 not included");
    zinf_launch_pool_free(&p);

    parse(&p, HOSTFILE);
    CHECK(zinf_launch_filter(&p, NULL, "worker-1:0") == 0, "%s", zinf_errmsg());
    CHECK(!strcmp(slots_of(&p, 0), "0,1,2,3") && !strcmp(slots_of(&p, 1), "1,2,3") && !strcmp(slots_of(&p, 2), "0,1"),
          "exclude worker-1:0: %s", slots_of(&p, 1));
    zinf_launch_pool_free(&p);

    parse(&p, HOSTFILE);
    CHECK(zinf_launch_filter(&p, NULL, "worker-0@worker-2:1") == 0, "%s", zinf_errmsg());
    CHECK(p.h[0].n == 0 && p.h[1].n == 4 && !strcmp(slots_of(&p, 2), "0"), "exclude a host and a slot");
    zinf_launch_pool_free(&p);

    /* slots ascend whatever the order written and a repeated one counts once, as DeepSpeed's
     * parse_node_config_list sorts them: rank 0 of the host is on GPU 1 */
    parse(&p, HOSTFILE);
    CHECK(zinf_launch_filter(&p, "worker-1:3,1,3", NULL) == 0 && !strcmp(slots_of(&p, 1), "1,3"), "order: %s",
          slots_of(&p, 1));
    zinf_launch_pool_free(&p);
    /* blanks around a slot number are ignored, as Python's int() in DeepSpeed's parse_node_config */
    parse(&p, HOSTFILE);
    CHECK(zinf_launch_filter(&p, "worker-1: 2, 0 @worker-2", NULL) == 0 && !strcmp(slots_of(&p, 1), "0,2") &&
              !strcmp(slots_of(&p, 2), "0,1") && p.h[0].n == 0,
          "blanks: %s", zinf_errmsg());
    zinf_launch_pool_free(&p);
    parse(&p, HOSTFILE);
    CHECK(zinf_launch_filter(&p, NULL, "worker-0:\t3 ,1") == 0 && !strcmp(slots_of(&p, 0), "0,2"), "exclude blanks: %s",
          zinf_errmsg());
    zinf_launch_pool_free(&p);

    const struct { const char *inc, *exc, *want; } bad[] = {
        {"worker-9", NULL, "--include: host 'worker-9' is not among the hosts (worker-0, worker-1, worker-2)"},
        {"worker-2:2", NULL, "--include: host worker-2 has slots 0-1, not 2"},
        {"worker-1:a", NULL, "slot 'a' is not a whole number"},
        {"worker-1:0 1", NULL, "--include: host worker-1: slot '0 1' is not a whole number"},
        {"worker-1:0, ", NULL, "--include: host worker-1: slot ' ' is not a whole number"},
        {"worker-1:", NULL, "host worker-1: no slot after ':'"},
        {"worker-1:0,", NULL, "an empty slot after ','"},
        {"worker-1@", NULL, "an empty host name after '@'"},
        {"@worker-1", NULL, "an empty host name"},
        {"", NULL, "--include: empty"},
        {"worker-1:0@worker-1:1", NULL, "host worker-1 is named twice"},
        {NULL, "worker-0@worker-1@worker-2", "--exclude 'worker-0@worker-1@worker-2' leaves no slots"},
        {"worker-0", "worker-1", "--include and --exclude exclude each other"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        parse(&p, HOSTFILE);
        expect_err(zinf_launch_filter(&p, bad[i].inc, bad[i].exc), bad[i].want, bad[i].want);
        zinf_launch_pool_free(&p);
    }
}

static void test_limit(void)
{
    zinf_launch_pool p;
    parse(&p, HOSTFILE);
    CHECK(zinf_launch_limit(&p, 2, 2) == 0, "%s", zinf_errmsg());
    CHECK(!strcmp(slots_of(&p, 0), "0,1") && !strcmp(slots_of(&p, 1), "0,1") && p.h[2].n == 0, "first 2 hosts x 2");
    zinf_launch_pool_free(&p);
    parse(&p, HOSTFILE);
    expect_err(zinf_launch_limit(&p, 4, -1), "--num_nodes 4: only 3 hosts", "too many nodes");
    zinf_launch_pool_free(&p);
    parse(&p, HOSTFILE);
    expect_err(zinf_launch_limit(&p, -1, 3), "--num_gpus 3: host worker-2 has 2 slots", "too many gpus");
    zinf_launch_pool_free(&p);
    parse(&p, HOSTFILE);
    expect_err(zinf_launch_limit(&p, 0, -1), "--num_nodes must be at least 1", "0 nodes");
    zinf_launch_pool_free(&p);
}

/* the argv as one string, for comparisons */
static char *joined(char **argv)
{
    size_t n = 1;
    for (char **p = argv; *p; p++) n += strlen(*p) + 1;
    char *s = calloc(n, 1);
    for (char **p = argv; *p; p++) {
        if (p != argv) strcat(s, " ");
        strcat(s, *p);
    }
    return s;
}

static void test_plan(const char *dir)
{
    char hf[4096];
    snprintf(hf, sizeof hf, "%s/hostfile", dir);
    FILE *f = fopen(hf, "w");
    fputs(HOSTFILE, f);
    fclose(f);
    char *prog[] = {"zinf", "train", "--max_steps", "3", NULL};
    char *env[] = {"PATH=/bin", "NCCL_DEBUG=INFO", "ZINF_COMM_TIMEOUT=60", "HOME=/root", "NCCLX=1", "OMP_NUM_THREADS=4",
                   "CUDA_VISIBLE_DEVICES=5,6", NULL};
    zinf_launch_opts o;
    zinf_launch_opts_defaults(&o);
    o.hostfile = hf;
    o.prog = prog;
    o.environ = env;
    char **argv;
    int n;
    CHECK(zinf_launch_plan(&o, &argv, &n, NULL) == 0, "%s", zinf_errmsg());
    char *s = joined(argv);
    /* every host whole: one app context, hosts in file order; exports sorted, HOME and NCCLX not */
    CHECK(n == 10, "ranks %d", n);
    CHECK(!strcmp(s, "mpirun -np 10 --host worker-0:4,worker-1:4,worker-2:2 --map-by slot --bind-to none "
                     "-x NCCL_DEBUG -x OMP_NUM_THREADS -x PATH -x ZINF_COMM_TIMEOUT zinf-launch --rank_bind auto zinf train "
                     "--max_steps 3"),
          "%s", s);
    free(s);
    zinf_launch_argv_free(argv);

    /* slots other than 0..k-1: one context per host, CUDA_VISIBLE_DEVICES where needed */
    o.include = "worker-0:2,3@worker-2";
    o.launcher_args = "--mca btl_tcp_if_include 'eth0 x' -v";
    char envf[4096];
    snprintf(envf, sizeof envf, "%s/ds_env", dir);
    f = fopen(envf, "w");
    fputs("# exported as given\nNCCL_IB_DISABLE=1\n\nFOO=a=b c\n", f);
    fclose(f);
    o.env_file = envf;
    CHECK(zinf_launch_plan(&o, &argv, &n, NULL) == 0, "%s", zinf_errmsg());
    s = joined(argv);
    CHECK(n == 4, "ranks %d", n);
    /* OpenMPI applies -x to its own app context: every context repeats the exports */
    CHECK(!strcmp(s, "mpirun --map-by slot --bind-to none --mca btl_tcp_if_include eth0 x -v "
                     "-np 2 --host worker-0:2 -x NCCL_IB_DISABLE=1 -x FOO=a=b c -x NCCL_DEBUG -x OMP_NUM_THREADS "
                     "-x PATH -x ZINF_COMM_TIMEOUT env CUDA_VISIBLE_DEVICES=2,3 zinf-launch --rank_bind auto zinf train "
                     "--max_steps 3 : -np 2 --host worker-2:2 -x NCCL_IB_DISABLE=1 -x FOO=a=b c -x NCCL_DEBUG "
                     "-x OMP_NUM_THREADS -x PATH -x ZINF_COMM_TIMEOUT zinf-launch --rank_bind auto zinf train "
                     "--max_steps 3"),
          "%s", s);
    free(s);
    zinf_launch_argv_free(argv);

    f = fopen(envf, "w");
    fputs("OK=1\nnot an assignment\n", f);
    fclose(f);
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL), "ds_env:2: expected NAME=VALUE, got 'not an assignment'",
               "env file");
    o.env_file = NULL;
    o.launcher_args = "--mca x 'y";
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL), "--launcher_args: an unterminated ' quote", "quote");
    o.launcher_args = NULL;
    o.num_gpus = 2;
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL), "cannot be combined with --include", "num + include");
    o.include = NULL;
    o.launcher = "slurm";
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL), "--launcher slurm: zinf-launch runs OpenMPI's mpirun", "launcher");
    o.launcher = "OpenMPI";
    o.ssh_port = 2222;
    CHECK(zinf_launch_plan(&o, &argv, &n, NULL) == 0, "%s", zinf_errmsg());
    s = joined(argv);
    CHECK(strstr(s, "--mca plm_rsh_args -p 2222") && n == 6, "ssh port, 3 hosts x 2: %s", s);
    free(s);
    zinf_launch_argv_free(argv);

    /* this node: its GPUs, renumbered through CUDA_VISIBLE_DEVICES as DeepSpeed's --include does */
    zinf_launch_opts_defaults(&o);
    o.prog = prog;
    o.local_gpus = 8;
    o.cuda_visible = "GPU-aa,GPU-bb,GPU-cc";
    CHECK(zinf_launch_plan(&o, &argv, &n, NULL) == 0 && n == 3, "CVD entries are the slots: %s", zinf_errmsg());
    zinf_launch_argv_free(argv);
    o.include = "localhost:2,0";
    CHECK(zinf_launch_plan(&o, &argv, &n, NULL) == 0, "%s", zinf_errmsg());
    s = joined(argv);
    CHECK(strstr(s, "-np 2 --host localhost:2 env CUDA_VISIBLE_DEVICES=GPU-aa,GPU-cc zinf") != NULL, "%s", s);
    free(s);
    zinf_launch_argv_free(argv);
    o.include = NULL;
    /* as CUDA reads it: up to an entry that starts with '-', nothing when set but empty; an empty
     * entry was a slot (a rank without a GPU) */
    o.cuda_visible = "0,1,";
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL),
               "CUDA_VISIBLE_DEVICES '0,1,': entry 3 is empty (GPU indices or UUIDs, separated by commas)", "CVD 0,1,");
    o.cuda_visible = "3,,5";
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL), "CUDA_VISIBLE_DEVICES '3,,5': entry 2 is empty", "CVD 3,,5");
    o.cuda_visible = "0,-1,2";
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL),
               "CUDA_VISIBLE_DEVICES '0,-1,2': CUDA sees no entry after '-1', so not '2'", "CVD 0,-1,2");
    o.cuda_visible = "4,-1";
    CHECK(zinf_launch_plan(&o, &argv, &n, NULL) == 0 && n == 1, "CVD 4,-1 is GPU 4 alone: %s", zinf_errmsg());
    zinf_launch_argv_free(argv);
    o.cuda_visible = "-1";
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL),
               "CUDA_VISIBLE_DEVICES '-1' hides every GPU of this node: --num_gpus N starts N ranks here", "CVD -1");
    o.cuda_visible = "";
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL), "CUDA_VISIBLE_DEVICES '' hides every GPU", "CVD empty");
    o.num_gpus = 2; /* CPU ranks, as on a node without a GPU */
    CHECK(zinf_launch_plan(&o, &argv, &n, NULL) == 0 && n == 2, "CVD empty, --num_gpus 2: %s", zinf_errmsg());
    zinf_launch_argv_free(argv);
    o.num_gpus = -1;
    o.cuda_visible = NULL;
    o.local_gpus = 0;
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL), "no GPU found on this node: --num_gpus N", "no gpus");
    o.num_gpus = 3;
    CHECK(zinf_launch_plan(&o, &argv, &n, NULL) == 0 && n == 3, "CPU ranks");
    zinf_launch_argv_free(argv);
    o.num_nodes = 2;
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL), "--num_nodes 2 needs a --hostfile", "nodes without hostfile");
    o.num_nodes = -1;
    o.local_gpus = 2;
    o.num_gpus = 3;
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL), "--num_gpus 3: host localhost has 2 slots", "more than the GPUs");
    o.hostfile = "/nonexistent/hostfile";
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL), "hostfile /nonexistent/hostfile: No such file", "missing");
}

/* DeepSpeed's --bind_core_list grammar (its help's example: "1,3-5,7" => [1,3,4,5,7]) */
static void test_cpulist(void)
{
    int *v, n;
    CHECK(zinf_launch_parse_cpulist("1,3-5,7", "L", &v, &n) == 0 && n == 5 && v[0] == 1 && v[1] == 3 && v[2] == 4 &&
              v[3] == 5 && v[4] == 7, "1,3-5,7: %s", zinf_errmsg());
    char buf[64];
    zinf_launch_cpulist(v, n, buf, sizeof buf);
    CHECK(!strcmp(buf, "1,3-5,7"), "condensed again: %s", buf);
    free(v);
    int c[] = {0, 1, 2, 3, 8, 10, 11, 13};
    zinf_launch_cpulist(c, 8, buf, sizeof buf);
    CHECK(!strcmp(buf, "0-3,8,10-11,13"), "%s", buf);
    zinf_launch_cpulist(c, 8, buf, 12);
    CHECK(!strcmp(buf, "0-3,8,..."), "a short buffer ends in ...: %s", buf);
    const struct { const char *in, *want; } bad[] = {
        {"3-1", "L '3-1': the range 3-1 ends before it starts"},
        {"0-3,2", "L '0-3,2': 2: the entries must ascend without overlapping"},
        {"4,1", "4,1': 1: the entries must ascend"},
        {"1,1", "1: the entries must ascend"},
        {"a", "'a' is not a CPU number or a range A-B"},
        {"1 ,2", "'1 ' is not a CPU number"},
        {"1-", "'1-' is not a CPU number"},
        {"1,", "nothing after the last ','"},
        {"", "L: empty"},
        {"70000", "'70000' is not a CPU number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect_err(zinf_launch_parse_cpulist(bad[i].in, "L", &v, &n), bad[i].want, bad[i].in);
}

/* The share of each local rank, against DeepSpeed's rule written out here: cores_per_rank =
 * cores // ranks, rank r takes cores [r*cpr, (r+1)*cpr), the rest stay free; zinf gives a rank
 * every hardware thread of its cores and one OpenMP thread per core. */
static const char *share_of(const int *cpus, const int *core, int n, const int *list, int nl, int r, int size,
                            bool strict, int *threads, int *rc)
{
    static char buf[128];
    int out[64], no = 0;
    *rc = zinf_launch_share(cpus, core, n, list, nl, r, size, strict, out, &no, threads);
    zinf_launch_cpulist(out, no, buf, sizeof buf);
    return buf;
}

static void test_share(void)
{
    /* two sockets of 4 cores with 2 threads each, numbered as Linux numbers Intel's: CPU i and
     * i + 8 are one core */
    int cpus[16], core[16];
    for (int i = 0; i < 16; i++) cpus[i] = i, core[i] = i % 8;
    int th, rc;
    const char *want2[] = {"0-3,8-11", "4-7,12-15"};
    for (int r = 0; r < 2; r++) {
        const char *got = share_of(cpus, core, 16, NULL, 0, r, 2, false, &th, &rc);
        CHECK(rc == 0 && !strcmp(got, want2[r]) && th == 4, "2 ranks, rank %d: %s, %d threads",
              r, got, th);
    }
    /* 3 ranks: 8 // 3 = 2 cores each, cores 6 and 7 free */
    const char *want3[] = {"0-1,8-9", "2-3,10-11", "4-5,12-13"};
    for (int r = 0; r < 3; r++) {
        const char *got = share_of(cpus, core, 16, NULL, 0, r, 3, true, &th, &rc);
        CHECK(rc == 0 && !strcmp(got, want3[r]) && th == 2, "3 ranks, rank %d: %s, %d threads", r, got, th);
    }
    /* 8 ranks: a core each; 9: more ranks than cores */
    CHECK(!strcmp(share_of(cpus, core, 16, NULL, 0, 7, 8, true, &th, &rc), "7,15") && th == 1 && rc == 0,
          "8 ranks, rank 7");
    share_of(cpus, core, 16, NULL, 0, 0, 9, false, &th, &rc);
    CHECK(rc == 1 && th == 1, "9 ranks by default: unbound, 1 thread (rc %d)", rc);
    share_of(cpus, core, 16, NULL, 0, 0, 9, true, &th, &rc);
    CHECK(rc < 0 && strstr(zinf_errmsg(), "--bind_cores_to_rank: 9 ranks on this node's 8 cores (CPUs 0-15): each rank "
                                          "needs a core of its own"), "9 ranks, strict: %s", zinf_errmsg());
    /* siblings side by side (CPU 2k and 2k+1 one core), a cpuset of 12 CPUs from 4 on */
    int c2[12], k2[12];
    for (int i = 0; i < 12; i++) c2[i] = 4 + i, k2[i] = (4 + i) / 2;
    CHECK(!strcmp(share_of(c2, k2, 12, NULL, 0, 1, 2, false, &th, &rc), "10-15") && th == 3, "adjacent siblings");
    /* a list: its CPUs dealt out in order, one thread per CPU */
    int list[] = {1, 3, 4, 5, 7, 9};
    CHECK(!strcmp(share_of(cpus, core, 16, list, 6, 1, 2, true, &th, &rc), "5,7,9") && th == 3, "list, rank 1");
    CHECK(!strcmp(share_of(cpus, core, 16, list, 5, 1, 2, true, &th, &rc), "4-5") && th == 2, "list of 5 by 2");
    share_of(cpus, core, 16, list, 6, 0, 7, true, &th, &rc);
    CHECK(rc < 0 && strstr(zinf_errmsg(), "--bind_core_list lists 6 CPUs for the 7 ranks of this node: at least one each"),
          "list too short: %s", zinf_errmsg());
    int far[] = {3, 16};
    share_of(cpus, core, 16, far, 2, 0, 1, true, &th, &rc);
    CHECK(rc < 0 && strstr(zinf_errmsg(), "--bind_core_list: CPU 16 is not among this node's CPUs (0-15)"), "%s",
          zinf_errmsg());
}

/* torchrun's flags and environment, the node-by-node start, and binding off */
static void test_torchrun(const char *dir)
{
    char *prog[] = {"zinf", "train", "--model", "gpt2", NULL};
    char *env[8] = {"PATH=/bin", NULL};
    zinf_launch_opts o;
    zinf_launch_opts_defaults(&o);
    o.prog = prog;
    o.environ = env;
    char **argv;
    int n;
    env[1] = "NPROC_PER_NODE=2";
    CHECK(zinf_launch_plan(&o, &argv, &n, NULL) == 0 && n == 2, "NPROC_PER_NODE=2 on a node without GPUs: %s",
          zinf_errmsg());
    zinf_launch_argv_free(argv);
    o.num_gpus = 2; /* the same value two ways is fine */
    CHECK(zinf_launch_plan(&o, &argv, &n, NULL) == 0 && n == 2, "%s", zinf_errmsg());
    zinf_launch_argv_free(argv);
    o.num_gpus = 3;
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL),
               "--num_gpus 3 and NPROC_PER_NODE=2 (environment) disagree: give one of them", "flag vs variable");
    o.num_gpus = -1;
    o.nproc_per_node = "4";
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL),
               "--nproc_per_node 4 and NPROC_PER_NODE=2 (environment) disagree", "torchrun flag vs variable");
    env[1] = NULL;
    o.local_gpus = 8;
    CHECK(zinf_launch_plan(&o, &argv, &n, NULL) == 0 && n == 4, "--nproc_per_node 4 of 8 GPUs: %d", n);
    zinf_launch_argv_free(argv);
    o.nproc_per_node = "gpu";
    CHECK(zinf_launch_plan(&o, &argv, &n, NULL) == 0 && n == 8, "--nproc_per_node gpu: every GPU: %d", n);
    zinf_launch_argv_free(argv);
    o.nproc_per_node = "two";
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL), "--nproc_per_node two: expected a whole number from 1, gpu or auto",
               "bad count");
    o.nproc_per_node = NULL;
    env[1] = "NNODES=1";
    env[2] = "NODE_RANK=0";
    env[3] = "MASTER_ADDR=10.1.2.3";
    env[4] = "MASTER_PORT=29500";
    char *notes = NULL;
    size_t nn = 0;
    FILE *f = open_memstream(&notes, &nn);
    CHECK(zinf_launch_plan(&o, &argv, &n, f) == 0 && n == 8, "one node, node rank 0: %s", zinf_errmsg());
    fclose(f);
    CHECK(strstr(notes, "zinf-launch: MASTER_ADDR and MASTER_PORT are not used: MPI does the rendezvous\n") != NULL,
          "%s", notes);
    free(notes);
    zinf_launch_argv_free(argv);
    o.master_port = 29501;
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL), "--master_port 29501 and MASTER_PORT=29500 (environment) disagree",
               "ports");
    o.master_port = -1;
    o.master_addr = "10.9.9.9";
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL),
               "--master_addr 10.9.9.9 and MASTER_ADDR=10.1.2.3 (environment) disagree", "addresses");
    o.master_addr = NULL;
    /* node by node: refused, with the command that starts both nodes from one */
    env[1] = "NNODES=2";
    env[2] = "NODE_RANK=1";
    env[5] = "NPROC_PER_NODE=8";
    f = open_memstream(&notes, &nn);
    expect_err(zinf_launch_plan(&o, &argv, &n, f),
               "NNODES=2 (environment) with NODE_RANK=1 (environment) is torchrun's start of one node at a time; zinf "
               "starts every node from one place, once: run the command above on one node with a hostfile of 'HOST "
               "slots=N' lines naming the nodes, 10.1.2.3 (MASTER_ADDR) first, or under Slurm submit "
               "jobs/slurm/train-multinode.sbatch", "node by node");
    fclose(f);
    CHECK(!strcmp(notes, "zinf-launch: zinf-launch --hostfile HOSTFILE --num_nodes 2 --num_gpus 8 zinf train --model "
                         "gpt2\n"), "the command: %s", notes);
    free(notes);
    env[2] = NULL; /* NNODES=2 alone: a hostfile is needed */
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL), "NNODES=2 (environment) needs a --hostfile naming the nodes",
               "NNODES without hostfile");
    o.nnodes = 3;
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL), "--nnodes 3 and NNODES=2 (environment) disagree", "nnodes");
    env[1] = NULL;
    o.nnodes = -1;
    o.node_rank = 1;
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL), "one node with --node_rank 1 is torchrun's start", "node rank alone");
    o.node_rank = -1;
    env[5] = NULL;
    /* the equivalent keeps the other flags, spelled so that a shell runs it */
    o.bind_core_list = "0-27,56-83";
    o.launcher_args = "--mca btl ^openib";
    char *eq = zinf_launch_equivalent(&o, 4, 8);
    CHECK(eq && !strcmp(eq, "zinf-launch --hostfile HOSTFILE --num_nodes 4 --num_gpus 8 --launcher_args "
                            "'--mca btl ^openib' --bind_core_list 0-27,56-83 zinf train --model gpt2"), "%s", eq);
    free(eq);
    o.launcher_args = NULL;
    /* binding off: no zinf-launch --rank_bind in the ranks' command; a list with it is a conflict */
    o.bind_core_list = NULL;
    o.bind_cores = 0;
    o.num_gpus = 2;
    CHECK(zinf_launch_plan(&o, &argv, &n, NULL) == 0, "%s", zinf_errmsg());
    char *s = joined(argv);
    CHECK(!strcmp(s, "mpirun -np 2 --host localhost:2 --map-by slot --bind-to none -x PATH zinf train --model gpt2"),
          "unbound: %s", s);
    free(s);
    zinf_launch_argv_free(argv);
    o.bind_core_list = "0,1";
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL),
               "--bind_core_list 0,1 with --bind_cores_to_rank false: the list is the cores to bind to", "list, off");
    o.bind_cores = 1;
    /* with a hostfile the launcher leaves the list to each host's ranks (without one it checks it
     * against this machine's CPUs, which differ from machine to machine) */
    char hf[4096];
    snprintf(hf, sizeof hf, "%s/localhost", dir);
    FILE *h = fopen(hf, "w");
    fputs("localhost slots=2\n", h);
    fclose(h);
    o.hostfile = hf;
    CHECK(zinf_launch_plan(&o, &argv, &n, NULL) == 0, "%s", zinf_errmsg());
    s = joined(argv);
    CHECK(strstr(s, " -x PATH zinf-launch --rank_bind 0,1 zinf train --model gpt2") != NULL, "listed: %s", s);
    free(s);
    zinf_launch_argv_free(argv);
    o.bind_core_list = "1-0";
    expect_err(zinf_launch_plan(&o, &argv, &n, NULL), "--bind_core_list '1-0': the range 1-0 ends before it starts",
               "bad list");
}

/* a hostfile of a large cluster: 6000 nodes of 8 GPUs, one --host list of every node */
static void test_large(const char *dir)
{
    char hf[4096];
    snprintf(hf, sizeof hf, "%s/big", dir);
    FILE *f = fopen(hf, "w");
    for (int i = 0; i < 6000; i++) fprintf(f, "gpu-node-%05d slots=8\n", i);
    fclose(f);
    char *prog[] = {"zinf", "train", NULL};
    char *env[] = {NULL};
    zinf_launch_opts o;
    zinf_launch_opts_defaults(&o);
    o.hostfile = hf;
    o.prog = prog;
    o.environ = env;
    char **argv;
    int n;
    CHECK(zinf_launch_plan(&o, &argv, &n, NULL) == 0, "%s", zinf_errmsg());
    CHECK(n == 48000, "ranks %d", n);
    const char *hl = NULL;
    for (char **p = argv; *p; p++)
        if (!strcmp(*p, "--host")) hl = p[1];
    CHECK(hl && strlen(hl) == 6000 * strlen("gpu-node-00000:8,") - 1, "--host list of %zu chars", hl ? strlen(hl) : 0);
    CHECK(hl && !strncmp(hl, "gpu-node-00000:8,gpu-node-00001:8,", 34) && !strcmp(hl + strlen(hl) - 16, "gpu-node-05999:8"),
          "--host list ends");
    zinf_launch_argv_free(argv);
}

static void test_cmdline(void)
{
    char *argv[] = {"mpirun", "-x", "A=b c", "it's", "", "plain-1.0:/x,y@z%+", NULL};
    char *s = zinf_launch_cmdline(argv);
    CHECK(!strcmp(s, "mpirun -x 'A=b c' 'it'\\''s' '' plain-1.0:/x,y@z%+"), "%s", s);
    free(s);
}

int main(void)
{
    char dir[] = "/tmp/zinf-launch-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_hostfile();
    test_filter();
    test_limit();
    test_plan(dir);
    test_large(dir);
    test_cpulist();
    test_share();
    test_torchrun(dir);
    test_cmdline();
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_done("test_launch");
}
