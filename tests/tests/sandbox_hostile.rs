//! Hostile model-written code through the real sandbox (CPython in wasmtime), one program after
//! another in the same host process: each ends with its protocol observation within the limit,
//! touches nothing outside its scratch folder, and the host survives them all.

mod common;

use catena_agent::tools::code_observation;
use catena_sandbox::{Exit, Limits};
use std::time::Duration;

const WALL: Duration = Duration::from_secs(2);
/// Generous room above the deadline for the scheduler and the teardown: the check is that the
/// deadline is enforced at all (an hour-long sleep would otherwise take an hour), not a speed.
const SLACK: Duration = Duration::from_secs(8);

/// Opens files until something stops it. The guest's handles are capped (256 in all, the
/// standard library's included) and the program is stopped there, so the host process keeps its
/// descriptors.
const OPEN_MANY_FILES: &str = "files = []\nfor i in range(20000):\n    files.append(open(f'/tmp/f{i}', 'w'))\nprint('opened', len(files))";

/// Folders of 200-character names, 30 deep (6,000 characters of path, past the host's
/// `PATH_MAX`), each made and opened through its parent's descriptor, then a sparse 1 GiB file at
/// the bottom: the scratch cap must still see it.
const NESTED_PAST_PATH_MAX: &str = "import os, time\nfd = os.open('/tmp', os.O_RDONLY)\nname = 'd' * 200\nfor _ in range(30):\n    os.mkdir(name, dir_fd=fd)\n    inner = os.open(name, os.O_RDONLY, dir_fd=fd)\n    os.close(fd)\n    fd = inner\nbig = os.open('big', os.O_WRONLY | os.O_CREAT, dir_fd=fd)\nos.ftruncate(big, 1 << 30)\ntime.sleep(1.5)\nprint('still running')";

/// What the sandbox says when it stops a program for its open files.
const TOO_MANY_OPEN: &str = "held more than 256 files and streams open at once";

struct Case {
    name: &'static str,
    code: String,
    check: fn(&Exit, &str),
}

fn timeout(exit: &Exit, observation: &str) {
    assert_eq!(exit, &Exit::Timeout);
    assert_eq!(
        observation,
        "[FAILED] Code exited with status 1.\n[STDERR:BEGIN]\nTime out. Check for infinite loops, blocked I/O (e.g., input()), or deadlocks.\n[STDERR:END]"
    );
}

fn failed_with(needle: &'static str) -> impl Fn(&Exit, &str) {
    move |exit, observation| {
        assert!(!matches!(exit, Exit::Status(0)), "{observation}");
        assert!(
            observation.starts_with("[FAILED] Code exited with status"),
            "{observation}"
        );
        assert!(
            observation.contains(needle),
            "expected {needle:?} in {observation}"
        );
    }
}

#[test]
fn hostile_programs_are_contained_one_after_another() {
    let sandbox = common::python_sandbox(Limits {
        wall: WALL,
        memory_bytes: 512 << 20,
        output_bytes: 64 << 10,
        scratch_bytes: 64 << 20,
    });
    // A host file the guest must not read, by absolute path or through a link.
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("secret.txt");
    std::fs::write(&secret, "TOP-SECRET").unwrap();
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let outside = secret_dir.path().join("written-by-guest");

    let cases = vec![
        Case {
            name: "endless loop",
            code: "while True:\n    pass".into(),
            check: timeout,
        },
        Case {
            name: "an hour of sleep",
            code: "import time\ntime.sleep(3600)\nprint('woke')".into(),
            check: timeout,
        },
        Case {
            name: "blocked on input",
            code: "import sys\nprint(sys.stdin.read())".into(),
            check: |exit, obs| {
                // stdin is empty, not a terminal: reading returns at once.
                assert_eq!(exit, &Exit::Status(0), "{obs}");
            },
        },
        Case {
            name: "memory bomb",
            code: "blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 1024 * 1024))".into(),
            check: |exit, obs| {
                assert!(!matches!(exit, Exit::Status(0)), "{obs}");
                assert!(obs.contains("MemoryError") || obs.contains("out of memory"), "{obs}");
            },
        },
        Case {
            name: "read /etc/passwd",
            code: "print(open('/etc/passwd').read())".into(),
            check: |exit, obs| failed_with("FileNotFoundError")(exit, obs),
        },
        Case {
            name: "read a host file by absolute path",
            code: format!("print(open({:?}).read())", secret.display().to_string()),
            check: |exit, obs| {
                failed_with("Error")(exit, obs);
                assert!(!obs.contains("TOP-SECRET"), "{obs}");
            },
        },
        Case {
            name: "list the user's home",
            code: format!("import os\nprint(os.listdir({home:?}))"),
            check: |exit, obs| failed_with("FileNotFoundError")(exit, obs),
        },
        Case {
            name: "climb out of the scratch folder",
            code: "print(open('/../../../../etc/hostname').read())".into(),
            check: |exit, obs| failed_with("Error")(exit, obs),
        },
        Case {
            name: "write outside scratch",
            code: format!(
                "open({:?}, 'w').write('x')",
                outside.display().to_string()
            ),
            check: |exit, obs| failed_with("Error")(exit, obs),
        },
        Case {
            name: "write into the standard library",
            code: "open('/usr/local/lib/evil.py', 'w').write('x')".into(),
            check: |exit, obs| failed_with("Error")(exit, obs),
        },
        Case {
            name: "a link out of scratch",
            code: format!(
                "import os\nos.symlink({:?}, '/tmp/link')\nprint(open('/tmp/link').read())",
                secret.display().to_string()
            ),
            check: |exit, obs| {
                failed_with("Error")(exit, obs);
                assert!(!obs.contains("TOP-SECRET"), "{obs}");
            },
        },
        Case {
            name: "a relative link out of scratch",
            code: "import os\nos.symlink('../../../../../../etc/passwd', '/tmp/up')\nprint(open('/tmp/up').read())".into(),
            check: |exit, obs| {
                failed_with("Error")(exit, obs);
                assert!(!obs.contains("root:"), "{obs}");
            },
        },
        Case {
            name: "open a socket",
            code: "import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 22))\nprint('connected')".into(),
            check: |exit, obs| failed_with("OSError")(exit, obs),
        },
        Case {
            name: "resolve a host name",
            code: "import socket\nprint(socket.gethostbyname('localhost'))".into(),
            check: |exit, obs| failed_with("Error")(exit, obs),
        },
        Case {
            name: "start a process",
            code: "import subprocess\nsubprocess.run(['ls', '/'])".into(),
            check: |exit, obs| failed_with("does not support processes")(exit, obs),
        },
        Case {
            name: "os.system",
            code: "import os\nos.system('ls /')".into(),
            check: |exit, obs| failed_with("AttributeError")(exit, obs),
        },
        Case {
            name: "print 100 MB",
            code: "print('x' * 100_000_000)".into(),
            check: |exit, obs| {
                assert_eq!(exit, &Exit::Status(0), "{obs}");
                assert!(obs.chars().count() < 1700, "observation not cut: {}", obs.len());
                assert!(obs.contains("characters truncated"), "{obs}");
            },
        },
        Case {
            name: "print 100 MB in pieces",
            code: "import sys\nfor _ in range(100):\n    sys.stdout.write('y' * 1_000_000)".into(),
            check: |exit, obs| {
                assert_eq!(exit, &Exit::Status(0), "{obs}");
                assert!(obs.chars().count() < 1700);
            },
        },
        Case {
            name: "deep recursion",
            code: "def f(n):\n    return f(n + 1)\nf(0)".into(),
            check: |exit, obs| failed_with("RecursionError")(exit, obs),
        },
        Case {
            name: "deep recursion with the limit raised",
            code: "import sys\nsys.setrecursionlimit(10**8)\ndef f(n):\n    return f(n + 1)\nf(0)".into(),
            check: |exit, obs| {
                assert!(!matches!(exit, Exit::Status(0)), "{obs}");
                assert!(obs.starts_with("[FAILED]"), "{obs}");
            },
        },
        Case {
            name: "fill the disk",
            code: "f = open('/tmp/big', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))".into(),
            check: |exit, obs| {
                assert!(matches!(exit, Exit::Killed(_)), "{obs}");
                assert!(obs.contains("wrote more than 64 MiB"), "{obs}");
            },
        },
        Case {
            name: "open twenty thousand files",
            code: OPEN_MANY_FILES.into(),
            check: |exit, obs| {
                assert!(matches!(exit, Exit::Killed(_)), "{obs}");
                assert!(obs.contains(TOO_MANY_OPEN), "{obs}");
                assert!(!obs.contains("opened 20000"), "{obs}");
            },
        },
        Case {
            name: "a big file nested past PATH_MAX",
            code: NESTED_PAST_PATH_MAX.into(),
            check: |exit, obs| {
                assert!(matches!(exit, Exit::Killed(_)), "{obs}");
                assert!(obs.contains("wrote more than 64 MiB"), "{obs}");
            },
        },
        Case {
            name: "the environment is empty",
            code: "import os\nprint(sorted(os.environ))".into(),
            check: |exit, obs| {
                assert_eq!(exit, &Exit::Status(0), "{obs}");
                assert!(obs.contains("['HOME', 'PYTHONTZPATH', 'TMPDIR']"), "{obs}");
            },
        },
    ];

    for case in &cases {
        let execution = sandbox
            .run(&case.code, b"")
            .unwrap_or_else(|e| panic!("{}: the sandbox failed: {e}", case.name));
        let observation = code_observation(&execution);
        eprintln!(
            "{:<40} {:>7.0} ms  {:?}",
            case.name,
            execution.elapsed.as_secs_f64() * 1e3,
            execution.exit
        );
        assert!(
            execution.elapsed < WALL + SLACK,
            "{} took {:?}",
            case.name,
            execution.elapsed
        );
        (case.check)(&execution.exit, &observation);
    }

    // Nothing escaped, and the host is still fine: a normal program runs after all that.
    assert!(!outside.exists());
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "TOP-SECRET");
    let after = sandbox.run("print(6 * 7)", b"").unwrap();
    assert_eq!(
        code_observation(&after),
        "[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n42\n[STDOUT:END]"
    );
}

/// The two exhaustion programs through the real binary, as a `<code>` call runs them.
#[test]
fn the_binary_contains_descriptor_and_disk_exhaustion() {
    let run = |code: &str| -> serde_json::Value {
        let out = common::catena(&["sandbox", "--json", code]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("one JSON object")
    };
    let files = run(OPEN_MANY_FILES);
    let killed = files["exit"]["killed"].as_str().unwrap_or_default();
    assert!(killed.contains(TOO_MANY_OPEN), "{files}");
    let nested = run(NESTED_PAST_PATH_MAX);
    let killed = nested["exit"]["killed"].as_str().unwrap_or_default();
    assert!(killed.contains("wrote more than 256 MiB"), "{nested}");
}

#[test]
fn stdin_status_and_stateless_calls() {
    let sandbox = common::python_sandbox(Limits::default());
    let run = sandbox
        .run("a, b = map(int, input().split())\nprint(a + b)", b"3 4\n")
        .unwrap();
    assert_eq!(
        code_observation(&run),
        "[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n7\n[STDOUT:END]"
    );
    let exit = sandbox.run("import sys\nsys.exit(3)", b"").unwrap();
    assert_eq!(
        code_observation(&exit),
        "[FAILED] Code exited with status 3 (no output)."
    );
    let silent = sandbox.run("x = 1", b"").unwrap();
    assert_eq!(
        code_observation(&silent),
        "[EXECUTED] Code exited with status 0 (no output)."
    );
    // Every call is a fresh interpreter: nothing survives.
    sandbox
        .run("open('/tmp/kept', 'w').write('x')\ny = 5", b"")
        .unwrap();
    let fresh = sandbox
        .run(
            "import os\nprint(os.path.exists('/tmp/kept'), 'y' in globals())",
            b"",
        )
        .unwrap();
    assert!(code_observation(&fresh).contains("False False"));
    let mixed = sandbox
        .run(
            "import sys\nprint('out')\nprint('err', file=sys.stderr)\nraise SystemExit(2)",
            b"",
        )
        .unwrap();
    assert_eq!(
        code_observation(&mixed),
        "[FAILED] Code exited with status 2 with mixed output:\n[STDOUT:BEGIN]\nout\n[STDOUT:END]\n[STDERR:BEGIN]\nerr\n[STDERR:END]"
    );
}

#[test]
fn scientific_stack_is_inside() {
    let sandbox = common::python_sandbox(Limits::default());
    let run = sandbox
        .run(
            "import numpy as np, sympy\nprint(int(np.arange(10).sum()), sympy.factorint(360))",
            b"",
        )
        .unwrap();
    assert_eq!(
        code_observation(&run),
        "[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n45 {2: 3, 3: 2, 5: 1}\n[STDOUT:END]"
    );
}

#[test]
fn a_session_keeps_variables_between_cells() {
    let sandbox = common::python_sandbox(Limits {
        wall: WALL,
        ..Limits::default()
    });
    let runtime = tokio_runtime();
    runtime.block_on(async {
        let mut session = sandbox.session().await.unwrap();
        let first = session.run_cell("x = 20\nimport math").await.unwrap();
        assert_eq!(first.exit, Exit::Status(0));
        let second = session
            .run_cell("print(x + 22, math.pi > 3)")
            .await
            .unwrap();
        assert_eq!(second.exit, Exit::Status(0));
        assert_eq!(second.stdout.to_text(), "42 True\n");
        let error = session.run_cell("1 / 0").await.unwrap();
        assert_eq!(error.exit, Exit::Status(1));
        assert!(error.stderr.to_text().contains("ZeroDivisionError"));
        // After an exception the interpreter is still usable.
        let third = session.run_cell("print(x)").await.unwrap();
        assert_eq!(third.stdout.to_text(), "20\n");
        // A cell stopped at its deadline ends the session.
        let stuck = session.run_cell("while True: pass").await.unwrap();
        assert_eq!(stuck.exit, Exit::Timeout);
        assert!(!session.is_alive());
        assert!(session.run_cell("print(1)").await.is_err());
    });
}

fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}
