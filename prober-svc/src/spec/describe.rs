//! A probe as `kubectl describe pod` prints it (kubectl's `DescribeProbe`), so that
//! `podward-prober status --pod` shows an annotation's probe the way operators read a spec's.

use super::{Handler, HttpScheme, PortRef, ProbeSpec};

impl PortRef {
    /// The port as `IntOrString.String()` prints it.
    fn text(&self) -> String {
        match self {
            PortRef::Number(n) => n.to_string(),
            PortRef::Name(n) => n.clone(),
        }
    }
}

impl ProbeSpec {
    /// `kubectl describe`'s line for this probe:
    /// `http-get http://:8080/healthz delay=0s timeout=1s period=10s #success=1 #failure=3`.
    pub fn describe(&self) -> String {
        let attrs = format!(
            "delay={}s timeout={}s period={}s #success={} #failure={}",
            self.initial_delay_seconds,
            self.timeout.as_secs(),
            self.period.as_secs(),
            self.success_threshold,
            self.failure_threshold
        );
        match &self.handler {
            // Go's `%v` of a []string.
            Handler::Exec { command } => format!("exec [{}] {attrs}", command.join(" ")),
            Handler::HttpGet(get) => {
                let scheme = match get.scheme {
                    HttpScheme::Http => "http",
                    HttpScheme::Https => "https",
                };
                let host = get.host.as_deref().unwrap_or("");
                let host = if host.contains(':') {
                    format!("[{host}]")
                } else {
                    host.to_owned()
                };
                format!(
                    "http-get {scheme}://{host}:{}{} {attrs}",
                    get.port.text(),
                    get.path
                )
            }
            Handler::TcpSocket { host, port } => format!(
                "tcp-socket {}:{} {attrs}",
                host.as_deref().unwrap_or(""),
                port.text()
            ),
            Handler::Grpc { port, service } => format!(
                "grpc <pod>:{port} {} {attrs}",
                service.as_deref().unwrap_or("")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::{ProbeType, parse_pod_probes};

    fn line(ann: &str) -> String {
        let p = parse_pod_probes(ann);
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        p.containers["c"]
            .get(ProbeType::Liveness)
            .expect("probe")
            .describe()
    }

    #[test]
    fn probes_read_as_kubectl_describe_prints_them() {
        assert_eq!(
            line(r#"{"c":{"livenessProbe":{"httpGet":{"path":"/healthz","port":"http"}}}}"#),
            "http-get http://:http/healthz delay=0s timeout=1s period=10s #success=1 #failure=3"
        );
        assert_eq!(
            line(
                r#"{"c":{"livenessProbe":{"exec":{"command":["cat","/tmp/x"]},"initialDelaySeconds":5,"failureThreshold":1}}}"#
            ),
            "exec [cat /tmp/x] delay=5s timeout=1s period=10s #success=1 #failure=1"
        );
        assert_eq!(
            line(r#"{"c":{"livenessProbe":{"tcpSocket":{"port":8080},"periodSeconds":2}}}"#),
            "tcp-socket :8080 delay=0s timeout=1s period=2s #success=1 #failure=3"
        );
        assert_eq!(
            line(r#"{"c":{"livenessProbe":{"grpc":{"port":9000}}}}"#),
            "grpc <pod>:9000  delay=0s timeout=1s period=10s #success=1 #failure=3"
        );
    }
}
