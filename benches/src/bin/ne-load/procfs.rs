//! CPU time and memory of a process, from `/proc/<pid>/stat` and `/proc/<pid>/status`.

use anyhow::Context as _;

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on every Linux
/// architecture the project targets).
const TICKS_PER_SECOND: f64 = 100.0;

/// One reading of a process.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcSample {
    /// User + system CPU seconds since the process started.
    pub cpu_seconds: f64,
    /// Resident set size now, bytes.
    pub rss: u64,
    /// Peak resident set size, bytes.
    pub rss_peak: u64,
}

/// Reads process `pid` (`"self"` for this one).
pub fn sample(pid: &str) -> anyhow::Result<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("cannot read /proc/{pid}/stat"))?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("no ')' in /proc/<pid>/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let ticks = |i: usize| -> anyhow::Result<f64> {
        Ok(fields
            .get(i)
            .context("short /proc/<pid>/stat")?
            .parse::<u64>()? as f64)
    };
    let cpu_seconds = (ticks(11)? + ticks(12)?) / TICKS_PER_SECOND;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("cannot read /proc/{pid}/status"))?;
    let kib = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    Ok(ProcSample {
        cpu_seconds,
        rss: kib("VmRSS:"),
        rss_peak: kib("VmHWM:"),
    })
}

/// `model name` and the number of processors, from `/proc/cpuinfo`.
pub fn machine() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = info
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    let cores = info.lines().filter(|l| l.starts_with("processor")).count();
    format!("{cores} cores, {model}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        // Burn a little CPU so that at least one tick is accounted.
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(30) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let s = sample("self").unwrap();
        assert!(s.cpu_seconds > 0.0, "{s:?}");
        assert!(s.rss > 1 << 20 && s.rss_peak >= s.rss, "{s:?}");
        assert!(machine().contains("cores"));
    }
}
