use sketchdb::gen::{splitmix64, wallet_address};
use sketchdb::query::Session;
use sketchdb::store::{Config, Event, Store};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BATCH: usize = 10_000;
const T0: i64 = 1_764_547_200_000;
const DAY: i64 = 86_400_000;
fn batch(k: u64, n: usize) -> Vec<Event> {
    (0..n as u64)
        .map(|i| {
            let r = splitmix64(k << 24 ^ i);
            let chain = if r & 1 == 0 { "a" } else { "b" };
            let t = T0 + (k / 50) as i64 * DAY + ((i as i64) * DAY) / n as i64;
            Event::new(
                t,
                wallet_address(7, (r >> 8) % 200_000),
                &[("chain", chain)],
            )
        })
        .collect()
}
fn main() {
    let dir = std::env::temp_dir().join("zz-spikes");
    let _ = std::fs::remove_dir_all(&dir);
    let store = Arc::new(Store::create(&dir, Config::default()).unwrap());
    for k in 0..20 {
        store.ingest_batch(&batch(k, BATCH)).unwrap();
    }
    store.flush().unwrap();
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let qs = [
        "DISTINCT wallets",
        "SEEN {w}",
        "COUNT {w}",
        "TOP 10 wallets",
    ];
    let mut hs = Vec::new();
    for r in 0..4u64 {
        let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
        hs.push(std::thread::spawn(move || {
            let mut s = Session::new(&store);
            s.options.exact_fallback = false;
            let texts: Vec<String> = qs
                .iter()
                .map(|t| t.replace("{w}", &wallet_address(7, r)))
                .collect();
            let mut q = r as usize;
            while !stop.load(Ordering::Relaxed) {
                let k = q % 4;
                let st = Instant::now();
                s.query(&texts[k]).unwrap();
                let e = st.elapsed();
                if e > Duration::from_millis(20) {
                    println!(
                        "{:>8.3}s reader {r} {:<18} {:>8.1} ms",
                        (st - t0).as_secs_f64(),
                        qs[k],
                        e.as_secs_f64() * 1e3
                    );
                }
                q += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
        }));
    }
    let mut k = 20;
    while t0.elapsed() < Duration::from_secs(25) {
        let b = batch(k, BATCH);
        let st = Instant::now();
        store.ingest_batch(&b).unwrap();
        let a = st.elapsed();
        store.flush().unwrap();
        let e = st.elapsed();
        if e > Duration::from_millis(40) {
            println!(
                "{:>8.3}s writer batch {k} ingest {:.1} ms total {:.1} ms",
                (st - t0).as_secs_f64(),
                a.as_secs_f64() * 1e3,
                e.as_secs_f64() * 1e3
            );
        }
        k += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    println!("batches {}", k - 20);
}
