//! The operator's Kafka settings: merging, refusals, the Java client's files, and what is printed.

use super::*;

fn options(file: Option<PathBuf>, flags: &[(&str, &str)]) -> KafkaOptions {
    KafkaOptions {
        kafka_properties_file: file,
        kafka_property: flags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..KafkaOptions::default()
    }
}

#[test]
fn the_options_debug_print_names_the_properties_and_hides_their_values() {
    let with = options(None, &[("sasl.password", "hunter2-secret"), ("client.id", "abc")]);
    let printed = format!("{with:?}");
    assert!(!printed.contains("hunter2-secret") && !printed.contains("abc"), "{printed}");
    assert!(printed.contains("sasl.password") && printed.contains("client.id"), "{printed}");
}

#[test]
fn librdkafka_is_built_with_tls_every_sasl_mechanism_oidc_and_zstd() {
    let features = builtin_features();
    let have: Vec<&str> = features.split(',').collect();
    for needed in NEEDED_FEATURES {
        assert!(have.contains(needed), "{needed} missing from librdkafka's builtin.features: {features}");
    }
}

#[test]
fn a_confluent_cloud_file_becomes_librdkafka_properties() {
    let dir = std::env::temp_dir().join(format!("props-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("client.properties");
    std::fs::write(
        &path,
        "# Required connection configs for Kafka producer, consumer, and admin\n\
         bootstrap.servers=pkc-123.eu-west-1.aws.confluent.cloud:9092\n\
         security.protocol=SASL_SSL\n\
         sasl.mechanisms=PLAIN\n\
         sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n  \
         username='KEY' password='SE=CRET';\n\
         ! a comment\n\
         client.dns.lookup=use_all_dns_ips\n\
         session.timeout.ms : 45000\n",
    )
    .unwrap();
    let env = [("KAFKA_PROPERTY_SESSION_TIMEOUT_MS".to_string(), "30000".to_string())];
    let props = Properties::load(&options(Some(path), &[("session.timeout.ms", "20000")]), env).unwrap();
    assert_eq!(props.brokers(None), "pkc-123.eu-west-1.aws.confluent.cloud:9092");
    assert_eq!(props.brokers(Some("a:1")), "a:1");
    assert_eq!(props.values.get("sasl.username").map(String::as_str), Some("KEY"));
    assert_eq!(props.values.get("sasl.password").map(String::as_str), Some("SE=CRET"));
    assert_eq!(props.values.get("session.timeout.ms").map(String::as_str), Some("20000"), "a flag wins");
    assert!(!props.values.contains_key("client.dns.lookup"));
    assert!(!format!("{props:?}").contains("SE=CRET"), "values are never printed");
    let mut settings = ClientConfig::new();
    props.apply(&mut settings);
    assert_eq!(settings.get("sasl.mechanisms"), Some("PLAIN"));
    assert_eq!(settings.get("bootstrap.servers"), None, "the brokers are set by whoever creates the client");
}

#[test]
fn the_environment_names_properties_with_underscores_for_dots() {
    let env = [
        ("KAFKA_PROPERTY_SASL_MECHANISM".to_string(), "SCRAM-SHA-512".to_string()),
        ("KAFKA_BROKERS".to_string(), "ignored".to_string()),
    ];
    let props = Properties::load(&options(None, &[]), env).unwrap();
    assert_eq!(props.names(), ["sasl.mechanism"]);
}

#[test]
fn properties_the_projector_owns_and_java_keystores_are_refused_with_what_to_do() {
    let err = Properties::load(&options(None, &[("enable.auto.commit", "true")]), []).unwrap_err();
    assert!(err.contains("enable.auto.commit"), "{err}");
    let err = Properties::load(&options(None, &[("ssl.truststore.location", "/x.jks")]), []).unwrap_err();
    assert!(err.contains("ssl.ca.location"), "{err}");
    let err = Properties::load(&options(None, &[("sasl.jaas.config", "x required;")]), []).unwrap_err();
    assert!(err.contains("sasl.username"), "{err}");
}

#[test]
fn aws_java_client_properties_for_msk_iam_select_msk_iam_over_oauthbearer_and_tls() {
    let sasl = [
        ("sasl.mechanism", "AWS_MSK_IAM"),
        ("sasl.jaas.config", "software.amazon.msk.auth.iam.IAMLoginModule required;"),
        ("sasl.client.callback.handler.class", "software.amazon.msk.auth.iam.IAMClientCallbackHandler"),
    ];
    let oauth = [
        ("sasl.mechanism", "OAUTHBEARER"),
        ("sasl.jaas.config", "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"),
        ("sasl.login.callback.handler.class", "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler"),
    ];
    for flags in [&sasl[..], &oauth[..], &[][..]] {
        let mut options = options(None, flags);
        if flags.is_empty() {
            options.kafka_auth = KafkaAuth::AwsMskIam;
        }
        let props = Properties::load(&options, []).unwrap();
        assert!(props.iam.is_some(), "MSK IAM selected by {flags:?}");
        assert_eq!(props.names(), ["sasl.mechanism", "security.protocol"], "{flags:?}");
        let mut settings = ClientConfig::new();
        props.apply(&mut settings);
        assert_eq!(settings.get("sasl.mechanism"), Some("OAUTHBEARER"));
        assert_eq!(settings.get("security.protocol"), Some("SASL_SSL"));
    }
    let plain = Properties::load(&options(None, &[("sasl.mechanism", "OAUTHBEARER")]), []).unwrap();
    assert!(plain.iam.is_none(), "OAUTHBEARER alone is not MSK IAM");
}

#[test]
fn msk_iam_refuses_another_mechanism_or_token_source() {
    for flags in [
        [("sasl.mechanism", "SCRAM-SHA-512")],
        [("sasl.oauthbearer.method", "OIDC")],
        [("enable.sasl.oauthbearer.unsecure.jwt", "true")],
    ] {
        let mut options = options(None, &flags);
        options.kafka_auth = KafkaAuth::AwsMskIam;
        let err = Properties::load(&options, []).unwrap_err();
        assert!(err.contains(flags[0].0), "{flags:?}: {err}");
    }
}

#[test]
fn a_line_without_a_separator_names_its_line() {
    assert_eq!(parse_properties("a=1\n\n# c\nbroken\n"), Err(4));
    assert_eq!(parse_properties("a=1\\\n  2\nb:3").unwrap(), [("a".into(), "12".into()), ("b".into(), "3".into())]);
    assert!(parse_pair("novalue").is_err());
}
