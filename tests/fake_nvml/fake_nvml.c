/*
 * fake_nvml.c - a scriptable stand-in for NVIDIA's libnvidia-ml.so.1, for the test suite.
 *
 * Built by tests/fake_nvml.py against NVIDIA's own nvml.h (PyPI package nvidia-nvml-dev), so
 * the compiler checks every prototype, and loaded by the real, unmodified `pynvml` binding
 * (nvidia-ml-py) through its ordinary CDLL("libnvidia-ml.so.1").
 *
 * GPU state comes from the text file named by $FAKE_NVML_STATE, read with getenv() at each
 * call (an in-process Python may change os.environ). The file is parsed lazily and re-parsed
 * only when its (st_dev, st_ino, st_mtime, st_size) change: a call costs one stat(). Handles
 * point into static arrays and stay valid across re-parses.
 *
 * STATE FILE FORMAT -- one statement per line; blank lines and lines starting with '#' are
 * ignored. A value is the rest of the line after its key (it may contain spaces).
 *
 *   <global-key> <value>             global setting
 *   gpu <i> <key> <value>            GPU i; GPU count = 1 + highest i, and every i below it
 *                                    must have at least one line
 *   mig <i> <j> <key> <value>        MIG child j (0..6) of GPU i; children must be contiguous
 *   at <t> <statement>               timeline: a global, gpu or mig statement that takes effect
 *                                    from epoch + t seconds on (CLOCK_REALTIME); of the entries
 *                                    for one field, the latest with t <= now wins, before any
 *                                    of them the static value holds. GPUs and MIG children are
 *                                    fixed by the static lines; the timeline only changes fields.
 *
 * Global keys: driver_version <str>, nvml_version <str>, cuda_driver_version <int, 12040 =
 *   12.4>, init_error <nvmlReturn_t; 0 = none> (returned by nvmlInit*), epoch <unix seconds,
 *   double; static only>.
 * Device keys (gpu and mig lines; some only make sense on one of them):
 *   uuid, name <str>; pci_bus_id <[domain:]bus:device.function, hex>; pci_device_id <int>;
 *   memory_total, memory_used, memory_reserved <bytes>; gpu_util, memory_util <0..100>;
 *   power_mw <int>; energy_mj <int>; energy_follows_power <0|1>; temperature_c <int>;
 *   sm_clock_mhz, mem_clock_mhz <int>; processes, graphics_processes <pid:bytes,... or ->;
 *   unsupported <Name,... or ->; lost <0|1>; mig_mode <auto|0|1>;
 *   gpu_instance_id, compute_instance_id <int> (MIG children); gpm <0|1> (GPUs only);
 *   sm_active, sm_occupancy, tensor_active, dram_active, fp64_active, fp32_active,
 *   fp16_active <percent, double 0..100, or nan> (GPM activities; GPUs and MIG children).
 *
 * Semantics:
 * - memory: memory_used is allocated memory (v2 `used`); v1 reports used = memory_used +
 *   memory_reserved (as real NVML does), free = total - used; v2 reports reserved separately
 *   and free = total - reserved - used.
 * - energy: energy_mj is the counter's value at the time it is set (epoch for a static line,
 *   epoch + t for a timeline entry). With energy_follows_power 1 the counter then grows by
 *   power_mw * elapsed seconds (mW * s = mJ), piecewise over power changes on the timeline.
 * - unsupported: names of calls that return NVML_ERROR_NOT_SUPPORTED on this device:
 *   GetName, GetUUID, GetPciInfo, GetMemoryInfo (v1 and v2), GetMemoryInfo_v2 (v2 only),
 *   GetUtilizationRates, GetPowerUsage, GetTotalEnergyConsumption, GetTemperature (both
 *   calls), GetTemperatureV (only the V call), GetClockInfo, GetComputeRunningProcesses,
 *   GetGraphicsRunningProcesses, GetMigMode (also: max MIG count 0, MIG handles unsupported).
 * - lost 1: every call on the device (handle lookups included, and calls on its MIG
 *   children) returns NVML_ERROR_GPU_IS_LOST; it still counts in nvmlDeviceGetCount.
 * - MIG: mig_mode auto = enabled when the GPU has children. Enabled: max MIG device count 7,
 *   child handles by index (missing index < 7 -> NOT_FOUND). Child handles answer name,
 *   uuid, index, memory, processes, gpu/compute instance id; utilisation, power, energy,
 *   temperature, clocks, PCI info and MIG mode return NVML_ERROR_NOT_SUPPORTED.
 * - clocks: NVML_CLOCK_GRAPHICS and NVML_CLOCK_SM -> sm_clock_mhz, NVML_CLOCK_MEM ->
 *   mem_clock_mhz, NVML_CLOCK_VIDEO -> NOT_SUPPORTED. Temperature: NVML_TEMPERATURE_GPU only.
 * - GPM (gpm 1): nvmlGpmQueryDeviceSupport says supported; nvmlGpmSampleGet (a GPU handle)
 *   and nvmlGpmMigSampleGet (the GPU's handle and a child's gpu_instance_id) record the time
 *   and the integral of each activity over the timeline (piecewise constant between
 *   entries); nvmlGpmMetricsGet gives, for SM_UTIL, SM_OCCUPANCY, ANY_TENSOR_UTIL,
 *   DRAM_BW_UTIL and FP64/FP32/FP16_UTIL, the exact mean between the two samples (other
 *   metric ids: NOT_SUPPORTED in their nvmlReturn); an activity scripted nan makes the mean
 *   of every interval that overlaps it NaN with NVML_SUCCESS, as a real H200 answered DRAM
 *   activity in the first interval after start. gpm 0: support 0, samples NOT_SUPPORTED;
 *   a MIG handle in nvmlGpmSampleGet: NOT_SUPPORTED (as real NVML: use the MIG call).
 * - No $FAKE_NVML_STATE or no file: nvmlInit* returns NVML_ERROR_DRIVER_NOT_LOADED.
 *   Malformed file: nvmlInit* returns NVML_ERROR_UNKNOWN, one line on stderr per bad file
 *   version. Calls after a successful init return NVML_ERROR_UNKNOWN while either lasts.
 * - Init/shutdown are reference counted; every other call before init (or after the last
 *   shutdown) returns NVML_ERROR_UNINITIALIZED. All calls are serialised by one mutex.
 */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS /* name versions explicitly; also declares legacy names */
#include <nvml.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_GPUS 128
#define MAX_MIG 7
#define MAX_PROCS 64
#define MIG_SLOTS 7 /* what nvmlDeviceGetMaxMigDeviceCount reports with MIG enabled */

/* GPM activities: state file key and NVML metric id, in the order of dev.act */
static const struct {
    const char *key;
    unsigned metric;
} activities[] = {
    {"sm_active", NVML_GPM_METRIC_SM_UTIL},
    {"sm_occupancy", NVML_GPM_METRIC_SM_OCCUPANCY},
    {"tensor_active", NVML_GPM_METRIC_ANY_TENSOR_UTIL},
    {"dram_active", NVML_GPM_METRIC_DRAM_BW_UTIL},
    {"fp64_active", NVML_GPM_METRIC_FP64_UTIL},
    {"fp32_active", NVML_GPM_METRIC_FP32_UTIL},
    {"fp16_active", NVML_GPM_METRIC_FP16_UTIL},
};
#define N_ACT ((int)(sizeof activities / sizeof activities[0]))

/* ------------------------------------------------------------------------------------------ */
/* data model                                                                                 */

enum {
    U_NAME = 1u << 0,
    U_UUID = 1u << 1,
    U_PCI = 1u << 2,
    U_MEM_V1 = 1u << 3,
    U_MEM_V2 = 1u << 4,
    U_UTIL = 1u << 5,
    U_POWER = 1u << 6,
    U_ENERGY = 1u << 7,
    U_TEMP = 1u << 8,
    U_TEMP_V = 1u << 9,
    U_CLOCK = 1u << 10,
    U_PROCS = 1u << 11,
    U_GPROCS = 1u << 12,
    U_MIG = 1u << 13,
};

static const struct {
    const char *name;
    unsigned bits;
} unsupported_names[] = {
    {"GetName", U_NAME},
    {"GetUUID", U_UUID},
    {"GetPciInfo", U_PCI},
    {"GetMemoryInfo", U_MEM_V1 | U_MEM_V2},
    {"GetMemoryInfo_v2", U_MEM_V2},
    {"GetUtilizationRates", U_UTIL},
    {"GetPowerUsage", U_POWER},
    {"GetTotalEnergyConsumption", U_ENERGY},
    {"GetTemperature", U_TEMP | U_TEMP_V},
    {"GetTemperatureV", U_TEMP_V},
    {"GetClockInfo", U_CLOCK},
    {"GetComputeRunningProcesses", U_PROCS},
    {"GetGraphicsRunningProcesses", U_GPROCS},
    {"GetMigMode", U_MIG},
};

struct proc {
    unsigned pid;
    unsigned long long bytes;
};

struct proclist {
    int n;
    struct proc p[MAX_PROCS];
};

struct dev {
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned pci_domain, pci_bus, pci_device, pci_device_id;
    unsigned long long memory_total, memory_used, memory_reserved;
    unsigned gpu_util, memory_util, power_mw, temperature_c, sm_clock_mhz, mem_clock_mhz;
    double energy_mj, energy_t0; /* counter value at energy_t0 (seconds after epoch) */
    unsigned energy_follows_power, lost, unsupported, gpu_instance_id, compute_instance_id;
    unsigned gpm;
    /* percent (NaN: unknown); its integral until act_t0, the time it was NaN until act_t0 */
    double act[N_ACT], act_int[N_ACT], act_nan[N_ACT], act_t0;
    int mig_mode; /* -1 = auto */
    int seen;     /* has a static line */
    struct proclist processes, graphics_processes;
};

struct gpu {
    struct dev d;
    int nmig;
    struct dev mig[MAX_MIG];
};

struct globals {
    char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    char nvml_version[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE];
    unsigned cuda_driver_version;
    unsigned init_error;
};

struct view {
    struct globals g;
    int ngpu;
    struct gpu gpus[MAX_GPUS]; /* keep last: only ngpu of them are copied */
};

struct entry {
    double t;
    int seq, gpu, mig; /* gpu -1: global; mig -1: the GPU itself */
    const char *key, *val;
};

struct state {
    double epoch;
    struct entry *entries;
    int nentries, applied; /* entries[0..applied) are in eff */
    char *text;            /* the file; keys and values point into it */
    struct view base, eff;
};

/* handles: addresses in these arrays; the index is the address, so nothing to initialise */
struct nvmlDevice_st {
    int unused;
};
static struct nvmlDevice_st g_gpu_handles[MAX_GPUS];
static struct nvmlDevice_st g_mig_handles[MAX_GPUS][MAX_MIG];

enum { ST_NOENV, ST_NOFILE, ST_BAD, ST_OK };

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_refcount;
static int g_status = ST_NOENV;
static struct state *g_state;
static double g_rel; /* now - epoch, set by refresh() */
static char g_path[4096];
static int g_have_ident;
static dev_t g_dev;
static ino_t g_ino;
static off_t g_size;
static struct timespec g_mtime;
static int g_warned_noenv;
static char g_warned_nofile[4096];

static void reset_lock_in_child(void) { pthread_mutex_init(&g_lock, NULL); }

__attribute__((constructor)) static void fake_nvml_ctor(void)
{
    pthread_atfork(NULL, NULL, reset_lock_in_child);
}

/* ------------------------------------------------------------------------------------------ */
/* parsing                                                                                    */

static int parse_u64(const char *s, unsigned long long *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static int parse_u32(const char *s, unsigned *out)
{
    unsigned long long v;
    if (parse_u64(s, &v) || v > 0xffffffffull)
        return -1;
    *out = (unsigned)v;
    return 0;
}

static int parse_double(const char *s, double *out)
{
    char *end;
    if (!*s)
        return -1;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || v != v)
        return -1;
    *out = v;
    return 0;
}

/* an activity in percent, or nan (a NaN mean with success, as real NVML answers at times) */
static int parse_activity(const char *s, double *out)
{
    if (!strcmp(s, "nan")) {
        *out = NAN;
        return 0;
    }
    return (parse_double(s, out) || *out < 0 || *out > 100) ? -1 : 0;
}

static int copy_str(char *dst, size_t size, const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= size)
        return -1;
    memcpy(dst, s, n + 1);
    return 0;
}

/* "[domain:]bus:device.function", hex */
static int parse_pci(const char *s, unsigned *domain, unsigned *bus, unsigned *device)
{
    unsigned a, b, c, f;
    int n = -1;
    if (!*s || strspn(s, "0123456789abcdefABCDEF:.") != strlen(s))
        return -1;
    if (sscanf(s, "%x:%x:%x.%x%n", &a, &b, &c, &f, &n) == 4 && n == (int)strlen(s)) {
        *domain = a, *bus = b, *device = c;
    } else {
        n = -1;
        if (sscanf(s, "%x:%x.%x%n", &b, &c, &f, &n) != 3 || n != (int)strlen(s))
            return -1;
        *domain = 0, *bus = b, *device = c;
    }
    return (*bus > 0xff || *device > 0x1f || f > 7) ? -1 : 0;
}

static int parse_procs(const char *s, struct proclist *out)
{
    struct proclist l = {0};
    if (!strcmp(s, "-") || !*s) {
        *out = l;
        return 0;
    }
    char buf[64];
    while (*s) {
        size_t n = strcspn(s, ",");
        if (n == 0 || n >= sizeof buf || l.n >= MAX_PROCS)
            return -1;
        memcpy(buf, s, n);
        buf[n] = 0;
        char *colon = strchr(buf, ':');
        if (!colon)
            return -1;
        *colon = 0;
        if (parse_u32(buf, &l.p[l.n].pid) || parse_u64(colon + 1, &l.p[l.n].bytes))
            return -1;
        l.n++;
        s += n;
        if (*s == ',')
            s++;
    }
    *out = l;
    return 0;
}

static int parse_unsupported(const char *s, unsigned *out)
{
    unsigned bits = 0;
    if (!strcmp(s, "-") || !*s) {
        *out = 0;
        return 0;
    }
    while (*s) {
        size_t n = strcspn(s, ",");
        size_t i, count = sizeof unsupported_names / sizeof unsupported_names[0];
        for (i = 0; i < count; i++)
            if (strlen(unsupported_names[i].name) == n && !strncmp(unsupported_names[i].name, s, n))
                break;
        if (i == count)
            return -1;
        bits |= unsupported_names[i].bits;
        s += n;
        if (*s == ',')
            s++;
    }
    *out = bits;
    return 0;
}

static int parse_bool(const char *s, unsigned *out)
{
    if (!strcmp(s, "0") || !strcmp(s, "1")) {
        *out = (unsigned)(*s - '0');
        return 0;
    }
    return -1;
}

/* set one device field; t = seconds after epoch at which the value holds (for energy) */
static int set_dev(struct dev *d, const char *key, const char *val, double t)
{
#define U32(k, m) if (!strcmp(key, k)) return parse_u32(val, &d->m)
#define U64(k, m) if (!strcmp(key, k)) return parse_u64(val, &d->m)
#define PCT(k, m) if (!strcmp(key, k)) return (parse_u32(val, &d->m) || d->m > 100) ? -1 : 0
#define BOOL(k, m) if (!strcmp(key, k)) return parse_bool(val, &d->m)
    if (!strcmp(key, "uuid"))
        return copy_str(d->uuid, sizeof d->uuid, val);
    if (!strcmp(key, "name"))
        return copy_str(d->name, sizeof d->name, val);
    if (!strcmp(key, "pci_bus_id"))
        return parse_pci(val, &d->pci_domain, &d->pci_bus, &d->pci_device);
    U32("pci_device_id", pci_device_id);
    U64("memory_total", memory_total);
    U64("memory_used", memory_used);
    U64("memory_reserved", memory_reserved);
    PCT("gpu_util", gpu_util);
    PCT("memory_util", memory_util);
    U32("power_mw", power_mw);
    U32("temperature_c", temperature_c);
    U32("sm_clock_mhz", sm_clock_mhz);
    U32("mem_clock_mhz", mem_clock_mhz);
    BOOL("energy_follows_power", energy_follows_power);
    BOOL("lost", lost);
    U32("gpu_instance_id", gpu_instance_id);
    U32("compute_instance_id", compute_instance_id);
    BOOL("gpm", gpm);
    for (int k = 0; k < N_ACT; k++)
        if (!strcmp(key, activities[k].key))
            return parse_activity(val, &d->act[k]);
    if (!strcmp(key, "energy_mj")) {
        unsigned long long v;
        if (parse_u64(val, &v))
            return -1;
        d->energy_mj = (double)v;
        d->energy_t0 = t;
        return 0;
    }
    if (!strcmp(key, "processes"))
        return parse_procs(val, &d->processes);
    if (!strcmp(key, "graphics_processes"))
        return parse_procs(val, &d->graphics_processes);
    if (!strcmp(key, "unsupported"))
        return parse_unsupported(val, &d->unsupported);
    if (!strcmp(key, "mig_mode")) {
        if (!strcmp(val, "auto")) {
            d->mig_mode = -1;
            return 0;
        }
        unsigned v;
        if (parse_bool(val, &v))
            return -1;
        d->mig_mode = (int)v;
        return 0;
    }
    return -1;
#undef U32
#undef U64
#undef PCT
#undef BOOL
}

static int set_global(struct globals *g, const char *key, const char *val)
{
    if (!strcmp(key, "driver_version"))
        return copy_str(g->driver_version, sizeof g->driver_version, val);
    if (!strcmp(key, "nvml_version"))
        return copy_str(g->nvml_version, sizeof g->nvml_version, val);
    if (!strcmp(key, "cuda_driver_version"))
        return parse_u32(val, &g->cuda_driver_version);
    if (!strcmp(key, "init_error"))
        return (parse_u32(val, &g->init_error) || g->init_error > 999) ? -1 : 0;
    return -1;
}

/* before a timeline entry changes a device at time t, bank the energy used until t */
static void energy_fold(struct dev *d, double t)
{
    if (t <= d->energy_t0)
        return;
    if (d->energy_follows_power)
        d->energy_mj += (double)d->power_mw * (t - d->energy_t0);
    d->energy_t0 = t;
}

static unsigned long long energy_now(const struct dev *d)
{
    double e = d->energy_mj;
    if (d->energy_follows_power && g_rel > d->energy_t0)
        e += (double)d->power_mw * (g_rel - d->energy_t0);
    return (unsigned long long)e;
}

/* before a timeline entry changes a device at time t, bank the activities until t */
static void activity_fold(struct dev *d, double t)
{
    if (t <= d->act_t0)
        return;
    for (int k = 0; k < N_ACT; k++) {
        if (isnan(d->act[k]))
            d->act_nan[k] += t - d->act_t0;
        else
            d->act_int[k] += d->act[k] * (t - d->act_t0);
    }
    d->act_t0 = t;
}

static char *next_word(char **p)
{
    char *s = *p;
    while (*s == ' ' || *s == '\t')
        s++;
    if (!*s)
        return NULL;
    char *w = s;
    while (*s && *s != ' ' && *s != '\t')
        s++;
    if (*s)
        *s++ = 0;
    while (*s == ' ' || *s == '\t')
        s++;
    *p = s;
    return w;
}

static int parse_index(const char *w, int limit, int *out)
{
    unsigned v;
    if (!w || parse_u32(w, &v) || v >= (unsigned)limit)
        return -1;
    *out = (int)v;
    return 0;
}

static int cmp_entry(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->seq - y->seq;
}

static void free_state(struct state *s)
{
    if (!s)
        return;
    free(s->entries);
    free(s->text);
    free(s);
}

static void init_dev(struct dev *d) { d->mig_mode = -1; }

/* parse text (owned by s afterwards) into s->base; returns 0 or -1 with err set */
static int parse_state(struct state *s, char *err, size_t errlen)
{
    static struct dev scratch_dev;
    static struct globals scratch_g;
    int cap = 0, lineno = 0, maxgpu = -1;
    char *p = s->text;

    for (int i = 0; i < MAX_GPUS; i++) {
        init_dev(&s->base.gpus[i].d);
        for (int j = 0; j < MAX_MIG; j++)
            init_dev(&s->base.gpus[i].mig[j]);
    }
    s->base.g.cuda_driver_version = 12040;
    while (p && *p) {
        char *line = p, *nl = strchr(p, '\n');
        p = nl ? nl + 1 : NULL;
        if (nl)
            *nl = 0;
        lineno++;
        size_t len = strlen(line);
        while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
            line[--len] = 0;
        char *rest = line, *w = next_word(&rest);
        if (!w || w[0] == '#')
            continue;
        double t = 0;
        int timed = 0, gpu = -1, mig = -1;
        if (!strcmp(w, "at")) {
            char *tw = next_word(&rest);
            if (!tw || parse_double(tw, &t)) {
                snprintf(err, errlen, "line %d: bad time after 'at'", lineno);
                return -1;
            }
            timed = 1;
            w = next_word(&rest);
            if (!w) {
                snprintf(err, errlen, "line %d: 'at' without a statement", lineno);
                return -1;
            }
        }
        if (!strcmp(w, "gpu") || !strcmp(w, "mig")) {
            if (parse_index(next_word(&rest), MAX_GPUS, &gpu) ||
                (w[0] == 'm' && parse_index(next_word(&rest), MAX_MIG, &mig))) {
                snprintf(err, errlen, "line %d: bad %s index", lineno, w);
                return -1;
            }
            w = next_word(&rest);
            if (!w) {
                snprintf(err, errlen, "line %d: missing key", lineno);
                return -1;
            }
        }
        const char *key = w, *val = rest;
        int bad;
        if (gpu < 0 && !strcmp(key, "epoch")) {
            bad = timed || parse_double(val, &s->epoch);
        } else if (timed) {
            if (gpu < 0) {
                scratch_g = s->base.g;
                bad = set_global(&scratch_g, key, val);
            } else {
                memset(&scratch_dev, 0, sizeof scratch_dev);
                bad = set_dev(&scratch_dev, key, val, t);
            }
            if (!bad) {
                if (s->nentries == cap) {
                    cap = cap ? cap * 2 : 64;
                    struct entry *e = realloc(s->entries, (size_t)cap * sizeof *e);
                    if (!e) {
                        snprintf(err, errlen, "out of memory");
                        return -1;
                    }
                    s->entries = e;
                }
                s->entries[s->nentries] = (struct entry){t, s->nentries, gpu, mig, key, val};
                s->nentries++;
            }
        } else if (gpu < 0) {
            bad = set_global(&s->base.g, key, val);
        } else {
            struct gpu *g = &s->base.gpus[gpu];
            struct dev *d = mig < 0 ? &g->d : &g->mig[mig];
            bad = set_dev(d, key, val, 0.0);
            d->seen = 1;
            if (gpu > maxgpu)
                maxgpu = gpu;
            if (mig >= g->nmig)
                g->nmig = mig + 1;
        }
        if (bad) {
            snprintf(err, errlen, "line %d: bad key or value for '%s': '%.60s'", lineno, key, val);
            return -1;
        }
    }
    s->base.ngpu = maxgpu + 1;
    for (int i = 0; i < s->base.ngpu; i++) {
        struct gpu *g = &s->base.gpus[i];
        if (!g->d.seen) {
            snprintf(err, errlen, "gpu %d has no lines (GPUs must be numbered 0..n-1)", i);
            return -1;
        }
        for (int j = 0; j < g->nmig; j++)
            if (!g->mig[j].seen) {
                snprintf(err, errlen, "mig %d %d has no lines (children must be 0..n-1)", i, j);
                return -1;
            }
    }
    for (int k = 0; k < s->nentries; k++) {
        const struct entry *e = &s->entries[k];
        if (e->gpu >= s->base.ngpu || (e->mig >= 0 && e->mig >= s->base.gpus[e->gpu].nmig)) {
            snprintf(err, errlen, "timeline entry for a device without static lines (gpu %d)",
                     e->gpu);
            return -1;
        }
    }
    if (s->nentries > 1)
        qsort(s->entries, (size_t)s->nentries, sizeof *s->entries, cmp_entry);
    return 0;
}

static int load_state(const char *path, struct state **out, struct stat *st, char *err,
                      size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open: %s", strerror(errno));
        return -1;
    }
    if (fstat(fd, st) != 0) {
        snprintf(err, errlen, "cannot stat: %s", strerror(errno));
        close(fd);
        return -1;
    }
    size_t cap = (size_t)st->st_size + 1, len = 0;
    char *text = malloc(cap);
    while (text) {
        if (len + 1 >= cap) {
            char *bigger = realloc(text, cap * 2);
            if (!bigger) {
                free(text);
                text = NULL;
                break;
            }
            text = bigger;
            cap *= 2;
        }
        ssize_t n = read(fd, text + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    if (!text) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    text[len] = 0;
    if (strlen(text) != len) {
        free(text);
        snprintf(err, errlen, "NUL byte in file");
        return -1;
    }
    struct state *s = calloc(1, sizeof *s);
    if (!s) {
        free(text);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->text = text;
    if (parse_state(s, err, errlen)) {
        free_state(s);
        return -1;
    }
    *out = s;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* state refresh (called with g_lock held)                                                    */

static void rebuild_eff(struct state *s)
{
    memcpy(&s->eff, &s->base,
           offsetof(struct view, gpus) + (size_t)s->base.ngpu * sizeof(struct gpu));
    s->applied = 0;
}

static void apply_entry(struct view *v, const struct entry *e)
{
    if (e->gpu < 0) {
        set_global(&v->g, e->key, e->val);
        return;
    }
    struct gpu *g = &v->gpus[e->gpu];
    struct dev *d = e->mig < 0 ? &g->d : &g->mig[e->mig];
    energy_fold(d, e->t);
    activity_fold(d, e->t);
    set_dev(d, e->key, e->val, e->t);
}

static void advance_timeline(void)
{
    struct state *s = g_state;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    g_rel = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 - s->epoch;
    if (s->applied > 0 && s->entries[s->applied - 1].t > g_rel)
        rebuild_eff(s); /* the clock went backwards */
    while (s->applied < s->nentries && s->entries[s->applied].t <= g_rel)
        apply_entry(&s->eff, &s->entries[s->applied++]);
}

static void refresh(void)
{
    const char *path = getenv("FAKE_NVML_STATE");
    struct stat st;
    if (!path || !*path) {
        g_status = ST_NOENV;
        g_have_ident = 0;
        if (!g_warned_noenv) {
            g_warned_noenv = 1;
            fprintf(stderr, "fake NVML: FAKE_NVML_STATE is not set: no driver\n");
        }
        return;
    }
    if (strlen(path) >= sizeof g_path || stat(path, &st) != 0) {
        g_status = ST_NOFILE;
        g_have_ident = 0;
        if (strncmp(g_warned_nofile, path, sizeof g_warned_nofile - 1)) {
            snprintf(g_warned_nofile, sizeof g_warned_nofile, "%s", path);
            fprintf(stderr, "fake NVML: state file %s not found: no driver\n", path);
        }
        return;
    }
    if (!g_have_ident || strcmp(path, g_path) || st.st_dev != g_dev || st.st_ino != g_ino ||
        st.st_size != g_size || st.st_mtim.tv_sec != g_mtime.tv_sec ||
        st.st_mtim.tv_nsec != g_mtime.tv_nsec) {
        struct state *s = NULL;
        char err[256];
        strcpy(g_path, path);
        if (load_state(path, &s, &st, err, sizeof err) == 0) {
            free_state(g_state);
            g_state = s;
            rebuild_eff(s);
            g_status = ST_OK;
        } else {
            g_status = ST_BAD; /* reported once: this file version is not parsed again */
            fprintf(stderr, "fake NVML: malformed state file %s: %s\n", path, err);
        }
        g_have_ident = 1;
        g_dev = st.st_dev;
        g_ino = st.st_ino;
        g_size = st.st_size;
        g_mtime = st.st_mtim;
    }
    if (g_status == ST_OK)
        advance_timeline();
}

/* ------------------------------------------------------------------------------------------ */
/* call helpers: every *_begin takes g_lock; every call ends with done(), which releases it    */

static nvmlReturn_t done(nvmlReturn_t rc)
{
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static nvmlReturn_t sys_begin(void)
{
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    refresh();
    return g_status == ST_OK ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

static int decode_handle(nvmlDevice_t h, int *gpu, int *mig)
{
    uintptr_t p = (uintptr_t)h, sz = sizeof(struct nvmlDevice_st);
    uintptr_t g0 = (uintptr_t)g_gpu_handles, m0 = (uintptr_t)g_mig_handles;
    if (p >= g0 && p < g0 + sizeof g_gpu_handles && (p - g0) % sz == 0) {
        *gpu = (int)((p - g0) / sz);
        *mig = -1;
        return 0;
    }
    if (p >= m0 && p < m0 + sizeof g_mig_handles && (p - m0) % sz == 0) {
        *gpu = (int)((p - m0) / sz) / MAX_MIG;
        *mig = (int)((p - m0) / sz) % MAX_MIG;
        return 0;
    }
    return -1;
}

static int mig_enabled(const struct gpu *g)
{
    if (g->d.unsupported & U_MIG)
        return 0;
    return g->d.mig_mode < 0 ? g->nmig > 0 : g->d.mig_mode;
}

struct ctx {
    struct gpu *g;
    struct dev *d;
    int gpu, mig;
};

enum { NO_MIG = 0, MIG_OK = 1 };

/* validate a handle: initialised, state ok, handle live, not lost, call supported */
static nvmlReturn_t dev_begin(nvmlDevice_t h, unsigned flag, int mig_ok, struct ctx *c)
{
    nvmlReturn_t rc = sys_begin();
    if (rc != NVML_SUCCESS)
        return rc;
    if (decode_handle(h, &c->gpu, &c->mig) || c->gpu >= g_state->eff.ngpu)
        return NVML_ERROR_INVALID_ARGUMENT;
    c->g = &g_state->eff.gpus[c->gpu];
    if (c->mig >= 0 && (c->mig >= c->g->nmig || !mig_enabled(c->g)))
        return NVML_ERROR_INVALID_ARGUMENT;
    c->d = c->mig < 0 ? &c->g->d : &c->g->mig[c->mig];
    if (c->g->d.lost || c->d->lost)
        return NVML_ERROR_GPU_IS_LOST;
    if (c->d->unsupported & flag)
        return NVML_ERROR_NOT_SUPPORTED;
    if (c->mig >= 0 && !mig_ok)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

static nvmlReturn_t put_str(char *buf, unsigned int length, const char *s)
{
    size_t n = strlen(s);
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (n + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, n + 1);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* init, shutdown, errors, system                                                             */

static nvmlReturn_t do_init(void)
{
    pthread_mutex_lock(&g_lock);
    refresh();
    if (g_status == ST_NOENV || g_status == ST_NOFILE)
        return done(NVML_ERROR_DRIVER_NOT_LOADED);
    if (g_status == ST_BAD)
        return done(NVML_ERROR_UNKNOWN);
    if (g_state->eff.g.init_error)
        return done((nvmlReturn_t)g_state->eff.g.init_error);
    g_refcount++;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlInit_v2(void) { return do_init(); }

nvmlReturn_t nvmlInit(void) { return do_init(); }

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return do_init();
}

nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0)
        return done(NVML_ERROR_UNINITIALIZED);
    g_refcount--;
    return done(NVML_SUCCESS);
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch ((int)result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    nvmlReturn_t rc = sys_begin();
    if (rc == NVML_SUCCESS)
        rc = put_str(version, length, g_state->eff.g.driver_version);
    return done(rc);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    nvmlReturn_t rc = sys_begin();
    if (rc == NVML_SUCCESS)
        rc = put_str(version, length, g_state->eff.g.nvml_version);
    return done(rc);
}

static nvmlReturn_t cuda_version(int *v)
{
    nvmlReturn_t rc = sys_begin();
    if (rc == NVML_SUCCESS) {
        if (!v)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *v = (int)g_state->eff.g.cuda_driver_version;
    }
    return done(rc);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    return cuda_version(cudaDriverVersion);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return cuda_version(cudaDriverVersion);
}

/* ------------------------------------------------------------------------------------------ */
/* enumeration and identity                                                                   */

static nvmlReturn_t get_count(unsigned int *count)
{
    nvmlReturn_t rc = sys_begin();
    if (rc == NVML_SUCCESS) {
        if (!count)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *count = (unsigned)g_state->eff.ngpu;
    }
    return done(rc);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) { return get_count(deviceCount); }

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) { return get_count(deviceCount); }

static nvmlReturn_t by_index(unsigned int index, nvmlDevice_t *device)
{
    nvmlReturn_t rc = sys_begin();
    if (rc != NVML_SUCCESS)
        return done(rc);
    if (!device || index >= (unsigned)g_state->eff.ngpu)
        return done(NVML_ERROR_INVALID_ARGUMENT);
    if (g_state->eff.gpus[index].d.lost)
        return done(NVML_ERROR_GPU_IS_LOST);
    *device = &g_gpu_handles[index];
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    return by_index(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return by_index(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    nvmlReturn_t rc = sys_begin();
    if (rc != NVML_SUCCESS)
        return done(rc);
    if (!uuid || !device)
        return done(NVML_ERROR_INVALID_ARGUMENT);
    struct view *v = &g_state->eff;
    for (int i = 0; i < v->ngpu; i++) {
        struct gpu *g = &v->gpus[i];
        if (!strcmp(g->d.uuid, uuid)) {
            if (g->d.lost)
                return done(NVML_ERROR_GPU_IS_LOST);
            *device = &g_gpu_handles[i];
            return done(NVML_SUCCESS);
        }
        for (int j = 0; mig_enabled(g) && j < g->nmig; j++)
            if (!strcmp(g->mig[j].uuid, uuid)) {
                if (g->d.lost || g->mig[j].lost)
                    return done(NVML_ERROR_GPU_IS_LOST);
                *device = &g_mig_handles[i][j];
                return done(NVML_SUCCESS);
            }
    }
    return done(NVML_ERROR_NOT_FOUND);
}

static nvmlReturn_t by_pci(const char *busId, nvmlDevice_t *device)
{
    unsigned domain, bus, dev;
    nvmlReturn_t rc = sys_begin();
    if (rc != NVML_SUCCESS)
        return done(rc);
    if (!busId || !device || parse_pci(busId, &domain, &bus, &dev))
        return done(NVML_ERROR_INVALID_ARGUMENT);
    struct view *v = &g_state->eff;
    for (int i = 0; i < v->ngpu; i++) {
        struct dev *d = &v->gpus[i].d;
        if (d->pci_domain == domain && d->pci_bus == bus && d->pci_device == dev) {
            if (d->lost)
                return done(NVML_ERROR_GPU_IS_LOST);
            *device = &g_gpu_handles[i];
            return done(NVML_SUCCESS);
        }
    }
    return done(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    return by_pci(pciBusId, device);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return by_pci(pciBusId, device);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, 0, MIG_OK, &c);
    if (rc == NVML_SUCCESS) {
        if (!index)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *index = (unsigned)(c.mig < 0 ? c.gpu : c.mig);
    }
    return done(rc);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, U_UUID, MIG_OK, &c);
    if (rc == NVML_SUCCESS)
        rc = put_str(uuid, length, c.d->uuid);
    return done(rc);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, U_NAME, MIG_OK, &c);
    if (rc == NVML_SUCCESS)
        rc = put_str(name, length, c.d->name);
    return done(rc);
}

static nvmlReturn_t pci_info(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, U_PCI, NO_MIG, &c);
    if (rc == NVML_SUCCESS && !pci)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        const struct dev *d = c.d;
        memset(pci, 0, sizeof *pci);
        pci->domain = d->pci_domain;
        pci->bus = d->pci_bus;
        pci->device = d->pci_device;
        pci->pciDeviceId = d->pci_device_id;
        snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, d->pci_domain,
                 d->pci_bus, d->pci_device);
        snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT,
                 d->pci_domain & 0xffff, d->pci_bus, d->pci_device);
    }
    return done(rc);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return pci_info(device, pci);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return pci_info(device, pci);
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return pci_info(device, pci);
}

/* ------------------------------------------------------------------------------------------ */
/* telemetry                                                                                  */

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, U_MEM_V1, MIG_OK, &c);
    if (rc == NVML_SUCCESS && !memory)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        unsigned long long used = c.d->memory_used + c.d->memory_reserved;
        memory->total = c.d->memory_total;
        memory->used = used;
        memory->free = used < c.d->memory_total ? c.d->memory_total - used : 0;
    }
    return done(rc);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, U_MEM_V2, MIG_OK, &c);
    if (rc == NVML_SUCCESS && !memory)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS && memory->version != nvmlMemory_v2)
        rc = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (rc == NVML_SUCCESS) {
        const struct dev *d = c.d;
        unsigned long long taken = d->memory_used + d->memory_reserved;
        memory->total = d->memory_total;
        memory->reserved = d->memory_reserved;
        memory->used = d->memory_used;
        memory->free = taken < d->memory_total ? d->memory_total - taken : 0;
    }
    return done(rc);
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, U_UTIL, NO_MIG, &c);
    if (rc == NVML_SUCCESS && !utilization)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        utilization->gpu = c.d->gpu_util;
        utilization->memory = c.d->memory_util;
    }
    return done(rc);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, U_POWER, NO_MIG, &c);
    if (rc == NVML_SUCCESS) {
        if (!power)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *power = c.d->power_mw;
    }
    return done(rc);
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, U_ENERGY, NO_MIG, &c);
    if (rc == NVML_SUCCESS) {
        if (!energy)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *energy = energy_now(c.d);
    }
    return done(rc);
}

static nvmlReturn_t temperature(nvmlDevice_t device, unsigned flag, int sensor, int *out)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, flag, NO_MIG, &c);
    if (rc == NVML_SUCCESS) {
        if (!out || sensor < 0 || sensor >= NVML_TEMPERATURE_COUNT)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else if (sensor != NVML_TEMPERATURE_GPU)
            rc = NVML_ERROR_NOT_SUPPORTED;
        else
            *out = (int)c.d->temperature_c;
    }
    return done(rc);
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int *temp)
{
    int t = 0;
    nvmlReturn_t rc = temp ? temperature(device, U_TEMP, (int)sensorType, &t)
                           : temperature(device, U_TEMP, -1, NULL);
    if (rc == NVML_SUCCESS)
        *temp = (unsigned)t;
    return rc;
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature_v)
{
    if (temperature_v && temperature_v->version != nvmlTemperature_v1) {
        /* still report uninitialised / bad handles first, as for every other call */
        struct ctx c;
        nvmlReturn_t rc = dev_begin(device, 0, MIG_OK, &c);
        return done(rc == NVML_SUCCESS ? NVML_ERROR_ARGUMENT_VERSION_MISMATCH : rc);
    }
    return temperature(device, U_TEMP_V, temperature_v ? (int)temperature_v->sensorType : -1,
                       temperature_v ? &temperature_v->temperature : NULL);
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, U_CLOCK, NO_MIG, &c);
    if (rc == NVML_SUCCESS) {
        if (!clock || (int)type < 0 || type >= NVML_CLOCK_COUNT)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else if (type == NVML_CLOCK_GRAPHICS || type == NVML_CLOCK_SM)
            *clock = c.d->sm_clock_mhz;
        else if (type == NVML_CLOCK_MEM)
            *clock = c.d->mem_clock_mhz;
        else
            rc = NVML_ERROR_NOT_SUPPORTED;
    }
    return done(rc);
}

/* ------------------------------------------------------------------------------------------ */
/* processes: *infoCount in = capacity of infos, out = number of processes;                   */
/* too small (or infos NULL with processes) -> NVML_ERROR_INSUFFICIENT_SIZE                   */

static nvmlReturn_t processes(nvmlDevice_t device, int graphics, unsigned int *infoCount,
                              nvmlProcessInfo_v2_t *v2, nvmlProcessInfo_v1_t *v1)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, graphics ? U_GPROCS : U_PROCS, MIG_OK, &c);
    if (rc != NVML_SUCCESS)
        return done(rc);
    if (!infoCount)
        return done(NVML_ERROR_INVALID_ARGUMENT);
    const struct proclist *l = graphics ? &c.d->graphics_processes : &c.d->processes;
    unsigned n = (unsigned)l->n;
    if (*infoCount < n || (n > 0 && !v1 && !v2)) {
        *infoCount = n;
        return done(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned i = 0; i < n; i++) {
        if (v2) {
            v2[i].pid = l->p[i].pid;
            v2[i].usedGpuMemory = l->p[i].bytes;
            v2[i].gpuInstanceId = c.mig < 0 ? 0xFFFFFFFFu : c.d->gpu_instance_id;
            v2[i].computeInstanceId = c.mig < 0 ? 0xFFFFFFFFu : c.d->compute_instance_id;
        } else {
            v1[i].pid = l->p[i].pid;
            v1[i].usedGpuMemory = l->p[i].bytes;
        }
    }
    *infoCount = n;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    return processes(device, 0, infoCount, infos, NULL);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v2_t *infos)
{
    return processes(device, 0, infoCount, infos, NULL);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                  nvmlProcessInfo_v1_t *infos)
{
    return processes(device, 0, infoCount, NULL, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos)
{
    return processes(device, 1, infoCount, infos, NULL);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_v2_t *infos)
{
    return processes(device, 1, infoCount, infos, NULL);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                   nvmlProcessInfo_v1_t *infos)
{
    return processes(device, 1, infoCount, NULL, infos);
}

/* ------------------------------------------------------------------------------------------ */
/* MIG                                                                                        */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, U_MIG, NO_MIG, &c);
    if (rc == NVML_SUCCESS) {
        if (!currentMode || !pendingMode)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *currentMode = *pendingMode = (unsigned)mig_enabled(c.g);
    }
    return done(rc);
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, 0, MIG_OK, &c);
    if (rc == NVML_SUCCESS) {
        if (!count || c.mig >= 0)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *count = mig_enabled(c.g) ? MIG_SLOTS : 0;
    }
    return done(rc);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *migDevice)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, U_MIG, MIG_OK, &c);
    if (rc != NVML_SUCCESS)
        return done(rc);
    if (!migDevice || c.mig >= 0 || !mig_enabled(c.g) || index >= MIG_SLOTS)
        return done(NVML_ERROR_INVALID_ARGUMENT);
    if (index >= (unsigned)c.g->nmig)
        return done(NVML_ERROR_NOT_FOUND);
    if (c.g->mig[index].lost)
        return done(NVML_ERROR_GPU_IS_LOST);
    *migDevice = &g_mig_handles[c.gpu][index];
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, 0, MIG_OK, &c);
    if (rc == NVML_SUCCESS) {
        if (!isMigDevice)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *isMigDevice = c.mig >= 0;
    }
    return done(rc);
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                          nvmlDevice_t *device)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(migDevice, 0, MIG_OK, &c);
    if (rc == NVML_SUCCESS) {
        if (!device || c.mig < 0)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *device = &g_gpu_handles[c.gpu];
    }
    return done(rc);
}

static nvmlReturn_t instance_id(nvmlDevice_t device, int compute, unsigned int *id)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, 0, MIG_OK, &c);
    if (rc == NVML_SUCCESS) {
        if (!id || c.mig < 0)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *id = compute ? c.d->compute_instance_id : c.d->gpu_instance_id;
    }
    return done(rc);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return instance_id(device, 0, id);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return instance_id(device, 1, id);
}

/* CPU affinity: every online CPU is "close" to every GPU (dask-cuda's CPUAffinity plugin asks
 * nvmlDeviceGetCpuAffinity(handle, ceil(ncpu / 64)) for each GPU). cpuSet is an array of
 * cpuSetSize unsigned longs, bit i of word w = CPU w * 64 + i. */
nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize,
                                      unsigned long *cpuSet)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, 0, MIG_OK, &c);
    if (rc == NVML_SUCCESS) {
        if (!cpuSet || cpuSetSize == 0) {
            rc = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            const unsigned bits = 8 * sizeof(unsigned long);
            long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
            memset(cpuSet, 0, cpuSetSize * sizeof(unsigned long));
            for (long i = 0; i < ncpu && (unsigned long)i < (unsigned long)cpuSetSize * bits; i++)
                cpuSet[i / bits] |= 1UL << (i % bits);
        }
    }
    return done(rc);
}

/* ------------------------------------------------------------------------------------------ */
/* GPM                                                                                        */

struct nvmlGpmSample_st {
    int filled, gpu, mig; /* mig -1: the whole GPU */
    double t;
    double integral[N_ACT], nan_time[N_ACT];
};

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample)
{
    if (!gpmSample)
        return NVML_ERROR_INVALID_ARGUMENT;
    *gpmSample = calloc(1, sizeof **gpmSample);
    return *gpmSample ? NVML_SUCCESS : NVML_ERROR_MEMORY;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample)
{
    if (!gpmSample)
        return NVML_ERROR_INVALID_ARGUMENT;
    free(gpmSample);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, 0, MIG_OK, &c);
    if (rc != NVML_SUCCESS)
        return done(rc);
    if (!gpmSupport)
        return done(NVML_ERROR_INVALID_ARGUMENT);
    if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION)
        return done(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    gpmSupport->isSupportedDevice = c.g->d.gpm;
    return done(NVML_SUCCESS);
}

static void fill_sample(nvmlGpmSample_t s, const struct ctx *c)
{
    s->filled = 1;
    s->gpu = c->gpu;
    s->mig = c->mig;
    s->t = g_rel;
    for (int k = 0; k < N_ACT; k++) {
        double since = g_rel - c->d->act_t0, now = c->d->act[k];
        s->integral[k] = c->d->act_int[k] + (isnan(now) ? 0.0 : now * since);
        s->nan_time[k] = c->d->act_nan[k] + (isnan(now) ? since : 0.0);
    }
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, 0, NO_MIG, &c);
    if (rc != NVML_SUCCESS)
        return done(rc);
    if (!gpmSample)
        return done(NVML_ERROR_INVALID_ARGUMENT);
    if (!c.d->gpm)
        return done(NVML_ERROR_NOT_SUPPORTED);
    fill_sample(gpmSample, &c);
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId,
                                 nvmlGpmSample_t gpmSample)
{
    struct ctx c;
    nvmlReturn_t rc = dev_begin(device, 0, NO_MIG, &c);
    if (rc != NVML_SUCCESS)
        return done(rc);
    if (!gpmSample || c.mig >= 0 || !mig_enabled(c.g))
        return done(NVML_ERROR_INVALID_ARGUMENT);
    if (!c.d->gpm)
        return done(NVML_ERROR_NOT_SUPPORTED);
    for (int j = 0; j < c.g->nmig; j++) {
        if (c.g->mig[j].gpu_instance_id != gpuInstanceId)
            continue;
        if (c.g->mig[j].lost)
            return done(NVML_ERROR_GPU_IS_LOST);
        c.mig = j;
        c.d = &c.g->mig[j];
        fill_sample(gpmSample, &c);
        return done(NVML_SUCCESS);
    }
    return done(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet)
{
    nvmlReturn_t rc = sys_begin();
    if (rc != NVML_SUCCESS)
        return done(rc);
    if (!metricsGet)
        return done(NVML_ERROR_INVALID_ARGUMENT);
    if (metricsGet->version != NVML_GPM_METRICS_GET_VERSION)
        return done(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    const struct nvmlGpmSample_st *a = metricsGet->sample1, *b = metricsGet->sample2;
    if (!a || !b || !a->filled || !b->filled || a->gpu != b->gpu || a->mig != b->mig ||
        metricsGet->numMetrics > NVML_GPM_METRIC_MAX)
        return done(NVML_ERROR_INVALID_ARGUMENT);
    double dt = b->t - a->t;
    for (unsigned i = 0; i < metricsGet->numMetrics; i++) {
        nvmlGpmMetric_t *m = &metricsGet->metrics[i];
        m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        m->value = 0;
        m->metricInfo.shortName = m->metricInfo.longName = m->metricInfo.unit = NULL;
        for (int k = 0; k < N_ACT; k++)
            if (m->metricId == activities[k].metric) {
                m->value = b->nan_time[k] != a->nan_time[k] ? NAN
                           : dt > 0 ? (b->integral[k] - a->integral[k]) / dt : 0.0;
                m->nvmlReturn = NVML_SUCCESS;
            }
    }
    return done(NVML_SUCCESS);
}
