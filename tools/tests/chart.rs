//! `rdmablk-chart`: a ratio table drawn as bars. The SVG holds every row's label and value as
//! the Markdown table prints them, one bar per row; a bad row is refused naming its line.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_rdmablk-chart");

fn dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("rdmablk-chart-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn every_row_is_a_bar_with_its_label_and_value() {
    let d = dir("rows");
    let (tsv, svg) = (d.join("r.tsv"), d.join("r.svg"));
    std::fs::write(
        &tsv,
        "# label\tratio\tlow\thigh\n\
         4k-randread-qd1: soft / local\t0.4312\t0.4100\t0.4400\n\
         4k-randread-qd32: soft / local\t0.8000\t-\t-\n\
         128k-read-qd8: local / fio\t1.0520\t0.9900\t1.1000\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["--title", "soft-vs-local: IOPS ratios", "--out"])
        .arg(&svg)
        .arg(&tsv)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let doc = std::fs::read_to_string(&svg).unwrap();
    assert!(doc.trim_start().starts_with("<svg") && doc.trim_end().ends_with("</svg>"));
    for text in [
        "soft-vs-local: IOPS ratios",
        "4k-randread-qd1: soft / local",
        "0.43 (0.41-0.44)",
        "4k-randread-qd32: soft / local",
        "\n0.80\n",
        "128k-read-qd8: local / fio",
        "1.05 (0.99-1.10)",
    ] {
        assert!(doc.contains(text), "the chart lacks {text:?}");
    }
    // The bars: filled rectangles in the bar colour (#1F77B4 at 0.7 opacity), one per row.
    let bars = doc
        .split("<rect")
        .skip(1)
        .filter(|r| r[..r.find("/>").unwrap_or(r.len())].contains("#1F77B4"))
        .count();
    assert_eq!(bars, 3, "bars in the chart");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_bad_row_is_refused_naming_its_line() {
    let d = dir("bad");
    let (tsv, svg) = (d.join("r.tsv"), d.join("r.svg"));
    std::fs::write(&tsv, "a\t1.0\t-\t-\nb\tfast\t-\t-\n").unwrap();
    let out = Command::new(BIN)
        .arg("--out")
        .arg(&svg)
        .arg(&tsv)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2") && err.contains("fast"), "{err}");
    assert!(!svg.exists(), "no chart from a bad table");
    std::fs::remove_dir_all(&d).unwrap();
}
