//! The job model: states, and what happens after an attempt (pure functions).

use std::time::Duration;

/// A job's state. `Failed` is terminal: the admin API calls it a dead letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobStatus {
    Pending,
    InProgress,
    Succeeded,
    Failed,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::InProgress => "in_progress",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(Self::Pending),
            "in_progress" => Some(Self::InProgress),
            "succeeded" => Some(Self::Succeeded),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

/// How a destination answered one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// 2xx.
    Delivered,
    /// 410 Gone: the receiver asks never to be sent this again.
    Gone,
    /// Anything else: another status, a timeout, a transport error. `retry_after` is the
    /// receiver's `Retry-After`, honoured only on 429 and 503.
    Retry { retry_after: Option<Duration> },
}

/// What to do with the job after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextStep {
    Succeed,
    RetryAfter(Duration),
    Fail,
}

/// The retry schedule: `schedule[i]` is the delay before retry `i + 1`, so a job gets at most
/// `schedule.len() + 1` attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    schedule: Vec<Duration>,
}

impl RetryPolicy {
    pub fn new(schedule: Vec<Duration>) -> Self {
        Self { schedule }
    }

    pub fn max_attempts(&self) -> i32 {
        i32::try_from(self.schedule.len()).unwrap_or(i32::MAX - 1) + 1
    }

    /// `attempts` counts attempts made so far, including the one just finished.
    /// `jitter` in [0, 1) stretches the delay by up to 10%: never earlier than scheduled.
    pub fn next_step(&self, attempts: i32, verdict: &Verdict, jitter: f64) -> NextStep {
        match verdict {
            Verdict::Delivered => NextStep::Succeed,
            Verdict::Gone => NextStep::Fail,
            Verdict::Retry { retry_after } => {
                let index = usize::try_from(attempts.max(1) - 1).unwrap_or(usize::MAX);
                let Some(&scheduled) = self.schedule.get(index) else {
                    return NextStep::Fail;
                };
                let longest = self.schedule.iter().max().copied().unwrap_or(scheduled);
                let asked = retry_after.unwrap_or(Duration::ZERO).min(longest);
                let base = scheduled.max(asked);
                let jitter = jitter.clamp(0.0, 1.0);
                NextStep::RetryAfter(base + base.mul_f64(0.1 * jitter))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    fn policy() -> RetryPolicy {
        RetryPolicy::new(vec![s(5), s(300), s(1800)])
    }

    const RETRY: Verdict = Verdict::Retry { retry_after: None };

    #[test]
    fn follows_the_schedule_then_fails() {
        let p = policy();
        assert_eq!(p.max_attempts(), 4);
        assert_eq!(p.next_step(1, &RETRY, 0.0), NextStep::RetryAfter(s(5)));
        assert_eq!(p.next_step(2, &RETRY, 0.0), NextStep::RetryAfter(s(300)));
        assert_eq!(p.next_step(3, &RETRY, 0.0), NextStep::RetryAfter(s(1800)));
        assert_eq!(p.next_step(4, &RETRY, 0.0), NextStep::Fail);
    }

    #[test]
    fn jitter_never_makes_an_attempt_earlier() {
        let p = policy();
        for j in [0.0, 0.3, 0.999, 5.0, -1.0] {
            let NextStep::RetryAfter(d) = p.next_step(2, &RETRY, j) else {
                panic!()
            };
            assert!(d >= s(300) && d <= s(330), "{d:?} for jitter {j}");
        }
    }

    #[test]
    fn retry_after_is_honoured_but_capped_and_never_earlier() {
        let p = policy();
        let asks = |secs| Verdict::Retry {
            retry_after: Some(s(secs)),
        };
        assert_eq!(p.next_step(1, &asks(60), 0.0), NextStep::RetryAfter(s(60)));
        assert_eq!(p.next_step(1, &asks(1), 0.0), NextStep::RetryAfter(s(5)));
        assert_eq!(
            p.next_step(1, &asks(86_400), 0.0),
            NextStep::RetryAfter(s(1800))
        );
        assert_eq!(p.next_step(4, &asks(1), 0.0), NextStep::Fail);
    }

    #[test]
    fn delivered_and_gone_are_final() {
        assert_eq!(
            policy().next_step(1, &Verdict::Delivered, 0.0),
            NextStep::Succeed
        );
        assert_eq!(policy().next_step(1, &Verdict::Gone, 0.0), NextStep::Fail);
    }
}
