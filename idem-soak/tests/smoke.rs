//! A short soak with faults, run with the tests: the program works end to end, orders and
//! payments both go out, a retention jump and its sweep happen, and the checker finds no
//! violation. The full soak is a documented command (RELIABILITY.md).

use std::process::Command;

#[test]
fn a_short_soak_with_faults_finds_no_violation() {
    let output = Command::new(env!("CARGO_BIN_EXE_idem-soak"))
        .args([
            "--seconds",
            "10",
            "--requests",
            "1500",
            "--clients",
            "6",
            "--fault-every",
            "1.5",
        ])
        .output()
        .expect("run idem-soak");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "idem-soak failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(stdout.contains("\nviolations: 0\n"), "{stdout}");
    assert!(stdout.contains("process kill: SIGKILL"), "{stdout}");
    assert!(stdout.contains("database restart: Fast"), "{stdout}");
    assert!(stdout.contains("retention jump: "), "{stdout}");
    assert!(stdout.contains("the sweep deleted "), "{stdout}");
    assert!(!stdout.contains("payments: 0 requests"), "{stdout}");
    eprintln!("{stdout}");
}
