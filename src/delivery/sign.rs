//! Standard Webhooks signing of forwards, so receivers verify with any Standard Webhooks library.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

pub struct SignedHeaders {
    pub webhook_id: String,
    pub webhook_timestamp: String,
    pub webhook_signature: String,
}

/// `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`. `key` is the decoded `whsec_`.
pub fn sign_standard_webhook(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> SignedHeaders {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let signature = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    SignedHeaders {
        webhook_id: id.to_owned(),
        webhook_timestamp: timestamp.to_string(),
        webhook_signature: format!("v1,{signature}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published Standard Webhooks v1 vector (standard-webhooks python test_sign_function).
    #[test]
    fn matches_the_standard_webhooks_vector() {
        let key = crate::verify::decode_base64_lenient("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let signed = sign_standard_webhook(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(
            signed.webhook_signature,
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }
}
