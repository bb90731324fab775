//! Small charts for the console, as inline SVG: no script, nothing loaded from elsewhere (the
//! console's content security policy allows neither). A chart is one bar per minute over
//! the last hour, oldest on the left; a minute without data has no bar.

use maud::{html, Markup};

/// Minutes a chart covers.
pub const MINUTES: usize = 60;

const WIDTH: usize = MINUTES * 4;
const HEIGHT: f64 = 40.0;

/// A bar chart of `values` (one per minute, oldest first) scaled to `max` (or to the largest
/// value), captioned with `label` and the latest value as `format` shows it.
pub fn bars(
    id: &str,
    label: &str,
    values: &[Option<f64>],
    max: Option<f64>,
    format: impl Fn(f64) -> String,
) -> Markup {
    let top = max
        .unwrap_or_else(|| values.iter().flatten().copied().fold(0.0, f64::max))
        .max(f64::MIN_POSITIVE);
    let latest = values.iter().rev().flatten().next().copied();
    html! {
        figure.chart id=(id) {
            figcaption {
                (label) ": "
                @match latest { Some(v) => { (format(v)) }, None => { "-" } }
            }
            svg xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(HEIGHT as usize)
                viewBox={ "0 0 " (WIDTH) " " (HEIGHT as usize) } role="img" aria-label=(label) {
                rect x="0" y="0" width=(WIDTH) height=(HEIGHT as usize) fill="#eef1f4" {}
                @for (i, v) in values.iter().enumerate() {
                    @if let Some(v) = v {
                        @let h = (v.max(0.0) / top * HEIGHT).clamp(if *v > 0.0 { 1.0 } else { 0.0 }, HEIGHT);
                        rect class="bar" x=(i * 4) y=(format!("{:.1}", HEIGHT - h)) width="3"
                            height=(format!("{:.1}", h)) fill="#3b6fb6" {
                            title { (format(*v)) }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_bar_per_minute_with_data_scaled_to_the_largest() {
        let mut values = vec![None; MINUTES];
        values[0] = Some(5.0);
        values[59] = Some(10.0);
        let svg = bars("c", "Deliveries per minute", &values, None, |v| {
            format!("{v}")
        })
        .into_string();
        assert_eq!(svg.matches(r#"class="bar""#).count(), 2);
        assert!(
            svg.contains(r#"x="236" y="0.0" width="3" height="40.0""#),
            "{svg}"
        );
        assert!(
            svg.contains(r#"x="0" y="20.0" width="3" height="20.0""#),
            "{svg}"
        );
        assert!(
            svg.contains("Deliveries per minute: 10"),
            "the latest value"
        );
        assert!(!svg.contains("<script"));
    }

    #[test]
    fn a_fixed_scale_and_no_data() {
        let values = vec![Some(0.5); MINUTES];
        let svg = bars("r", "Success", &values, Some(1.0), |v| {
            format!("{:.0} %", v * 100.0)
        })
        .into_string();
        assert!(svg.contains(r#"height="20.0""#) && svg.contains("Success: 50 %"));
        let empty = bars("e", "Lag", &[None; MINUTES], None, |v| v.to_string()).into_string();
        assert!(!empty.contains(r#"class="bar""#) && empty.contains("Lag: -"));
    }
}
