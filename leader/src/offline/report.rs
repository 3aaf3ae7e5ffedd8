//! Plain-text reports on stderr: aligned tables and "reason: count" lines.

use std::io::Write;

use super::FileReport;

/// A table printed with columns padded to their widest cell.
#[derive(Debug)]
pub struct Table<const N: usize> {
    rows: Vec<[String; N]>,
}

impl<const N: usize> Table<N> {
    pub fn new(header: [&str; N]) -> Self {
        Table {
            rows: vec![header.map(str::to_owned)],
        }
    }

    pub fn row(&mut self, cells: [String; N]) {
        self.rows.push(cells);
    }

    pub fn write(&self, out: &mut impl Write) -> std::io::Result<()> {
        let mut widths = [0usize; N];
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for row in &self.rows {
            let mut line = String::new();
            for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
                if i + 1 == N {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<w$}  "));
                }
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

/// `title: a 3, b 1` — printed only when some count is non-zero.
pub fn counts(
    out: &mut impl Write,
    title: &str,
    items: impl IntoIterator<Item = (String, u64)>,
) -> std::io::Result<()> {
    let items: Vec<String> = items
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    if items.is_empty() {
        return Ok(());
    }
    writeln!(out, "{title}: {}", items.join(", "))
}

/// One line per input file, then its first errors.
pub fn files(out: &mut impl Write, files: &[FileReport]) -> std::io::Result<()> {
    for f in files {
        let skipped: u64 = f.skipped.values().sum();
        write!(
            out,
            "{} ({}): {} flows, {} skipped",
            f.path.display(),
            f.format,
            f.records,
            skipped
        )?;
        if skipped > 0 {
            let reasons: Vec<String> = f.skipped.iter().map(|(k, n)| format!("{k} {n}")).collect();
            write!(out, " ({})", reasons.join(", "))?;
        }
        writeln!(out, ", {} unreadable", f.errors)?;
        for e in &f.first_errors {
            writeln!(out, "  {e}")?;
        }
        if f.errors > f.first_errors.len() as u64 {
            writeln!(
                out,
                "  ... and {} more",
                f.errors - f.first_errors.len() as u64
            )?;
        }
    }
    Ok(())
}
