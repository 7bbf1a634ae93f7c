//! A self-signed certificate and the server side of TLS, for tests that run HTTPS servers on
//! loopback.

use std::sync::Arc;

/// A server config for a self-signed certificate naming `name` (already expired when
/// `expired`), and the certificate as PEM (the CA a client would trust).
pub fn self_signed(name: &str, expired: bool) -> (Arc<rustls::ServerConfig>, String) {
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).expect("params");
    if expired {
        params.not_before = time::OffsetDateTime::now_utc() - time::Duration::days(30);
        params.not_after = time::OffsetDateTime::now_utc() - time::Duration::days(1);
    }
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("cert");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .expect("cert");
    (Arc::new(config), cert.pem())
}
