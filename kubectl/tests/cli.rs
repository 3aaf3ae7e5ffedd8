//! The binary as kubectl runs it, without a cluster: its help, its completion script, and
//! the error it gives when the kubeconfig leads nowhere.

use std::process::Command;

fn plugin(args: &[&str], kubeconfig: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-netenforcer"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("the plugin runs")
}

#[test]
fn help_and_completion_need_no_cluster() {
    let help = plugin(&["--help"], "/nonexistent");
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(
        help.starts_with("Review, promote, protect and acknowledge"),
        "{help}"
    );
    let zsh = plugin(&["completion", "zsh"], "/nonexistent");
    assert!(zsh.status.success());
    assert!(
        String::from_utf8(zsh.stdout)
            .unwrap()
            .contains("#compdef kubectl-netenforcer")
    );
}

#[test]
fn a_kubeconfig_that_leads_nowhere_is_named_in_the_error() {
    let dir = std::env::temp_dir().join(format!("ne-kubectl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("kubeconfig");
    // A cluster on a loopback port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        &config,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\n\
             contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n    namespace: shop\n\
             current-context: c\nusers:\n- name: u\n  user: {{}}\n"
        ),
    )
    .unwrap();
    let out = plugin(&["status"], config.to_str().unwrap());
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.starts_with("error: cannot list workloadnetworkpolicyproposals in namespace shop"),
        "{stderr}"
    );
    let missing = plugin(&["status"], dir.join("absent").to_str().unwrap());
    assert_eq!(missing.status.code(), Some(1));
    let stderr = String::from_utf8(missing.stderr).unwrap();
    assert!(
        stderr.contains("cannot reach the cluster with your kubeconfig"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
