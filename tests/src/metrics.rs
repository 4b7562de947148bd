//! Reading Prometheus text, as both binaries expose it on `/metrics`: the one parser the tests use.

/// The sum of every sample of `name` whose labels contain all of `labels` (each written `key="value"`);
/// 0 when there is none.
pub fn sample(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::sample;

    #[test]
    fn samples_are_summed_over_the_lines_whose_labels_match() {
        let text = "# HELP x_total X\nx_total{a=\"1\",b=\"2\"} 3\nx_total{a=\"1\",b=\"3\"} 4\nx_total_more 9\ny 1.5\n";
        assert_eq!(sample(text, "x_total", &[]), 7.0);
        assert_eq!(sample(text, "x_total", &["b=\"3\""]), 4.0);
        assert_eq!(sample(text, "y", &[]), 1.5);
        assert_eq!(sample(text, "z", &[]), 0.0);
    }
}
