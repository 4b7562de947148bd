//! What both binaries' `/metrics` say about the process itself, read from `/proc` at each scrape: its
//! version (`<binary>_build_info{version,commit} 1`, so a rollout can be graphed by version) and the
//! Prometheus client conventions' `process_*` metrics (resident and virtual memory, open and allowed
//! descriptors, CPU seconds, start time), so that memory and descriptors are watched without another
//! exporter. Off Linux the `process_*` metrics are left out.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// The clock ticks of `/proc/<pid>/stat`'s times: Linux's USER_HZ, 100 on every architecture it exposes.
const TICKS_PER_SECOND: f64 = 100.0;

/// Registers, on `root` (a registry without prefix), `<binary>_build_info` and the `process_*` metrics.
pub fn register(root: &mut Registry, binary: &str, version: &str, commit: &str) {
    let build = Build { name: format!("{binary}_build_info"), version: version.into(), commit: commit.into() };
    root.register_collector(Box::new(build));
    root.register_collector(Box::new(Process));
}

#[derive(Debug)]
struct Build {
    name: String,
    version: String,
    commit: String,
}

impl Collector for Build {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let help = "The version and commit this binary was built from (always 1)";
        let one = ConstGauge::new(1i64);
        let mut metric = encoder.encode_descriptor(&self.name, help, None, one.metric_type())?;
        let labels = [("version", self.version.as_str()), ("commit", self.commit.as_str())];
        one.encode(metric.encode_family(&labels)?)
    }
}

#[derive(Debug)]
struct Process;

/// The process as `/proc` shows it.
#[derive(Debug, Default, PartialEq)]
struct Reading {
    resident_bytes: i64,
    virtual_bytes: i64,
    open_fds: i64,
    max_fds: i64,
    cpu_seconds: f64,
    start_time_seconds: f64,
}

impl Reading {
    fn now() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let boot = std::fs::read_to_string("/proc/stat").ok()?;
        let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as i64;
        Self::parse(&stat, &status, &boot, &limits, open_fds)
    }

    /// From `/proc/self/stat`, `/proc/self/status` (`VmRSS`, in kB whatever the page size), `/proc/stat`
    /// (its `btime`), `/proc/self/limits`, and the descriptors open.
    fn parse(stat: &str, status: &str, boot: &str, limits: &str, open_fds: i64) -> Option<Self> {
        // The fields after the command's name, which is in parentheses and may hold spaces.
        let fields: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split_whitespace().collect();
        // Fields 14, 15 (utime, stime), 22 (starttime), 23 (vsize), counted from 1 with pid and comm
        // first: here from 3.
        let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
        let rss_kb: i64 =
            status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.split_whitespace().next()?.parse().ok()?;
        let btime: f64 = boot.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
        let max_fds = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Some(Reading {
            resident_bytes: rss_kb * 1024,
            virtual_bytes: field(23)? as i64,
            open_fds,
            max_fds,
            cpu_seconds: (field(14)? + field(15)?) / TICKS_PER_SECOND,
            start_time_seconds: btime + field(22)? / TICKS_PER_SECOND,
        })
    }
}

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(now) = Reading::now() else { return Ok(()) };
        let gauges = [
            ("process_resident_memory_bytes", "Resident memory size in bytes", now.resident_bytes),
            ("process_virtual_memory_bytes", "Virtual memory size in bytes", now.virtual_bytes),
            ("process_open_fds", "Number of open file descriptors", now.open_fds),
            ("process_max_fds", "Maximum number of open file descriptors", now.max_fds),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        let start = ConstGauge::new(now.start_time_seconds);
        let help = "Start time of the process since the Unix epoch, in seconds";
        start.encode(encoder.encode_descriptor("process_start_time_seconds", help, None, start.metric_type())?)?;
        let cpu = ConstCounter::new(now.cpu_seconds);
        let help = "Total user and system CPU time spent, in seconds";
        cpu.encode(encoder.encode_descriptor("process_cpu_seconds", help, None, cpu.metric_type())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_read_as_the_process_metrics_a_command_with_spaces_included() {
        let stat = "4242 (query api) S 1 4242 4242 0 -1 4194560 1 0 0 0 250 50 0 0 20 0 5 0 12345 \
                    104857600 2560 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let boot = "cpu  1 2 3\nbtime 1700000000\nprocesses 9\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            20000                20000                files\n";
        let status = "Name:\tquery-api\nVmRSS:\t   10240 kB\nThreads:\t5\n";
        let reading = Reading::parse(stat, status, boot, limits, 17).unwrap();
        assert_eq!(
            reading,
            Reading {
                resident_bytes: 10240 * 1024,
                virtual_bytes: 104_857_600,
                open_fds: 17,
                max_fds: 20_000,
                cpu_seconds: 3.0,
                start_time_seconds: 1_700_000_000.0 + 123.45,
            }
        );
    }

    #[test]
    fn the_registry_renders_build_info_and_this_process_metrics() {
        let mut root = Registry::default();
        register(&mut root, "api", "0.1.0", "abc1234");
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &root).unwrap();
        assert!(out.contains("api_build_info{version=\"0.1.0\",commit=\"abc1234\"} 1"), "{out}");
        for name in ["process_resident_memory_bytes ", "process_open_fds ", "process_cpu_seconds_total "] {
            assert!(out.contains(name), "{name} in {out}");
        }
        let rss: f64 =
            out.lines().find_map(|l| l.strip_prefix("process_resident_memory_bytes ")).unwrap().parse().unwrap();
        assert!(rss > 1_000_000.0, "this test's own process: {rss}");
    }
}
