//! The real Fashion-MNIST training set through the default `--data` path (skipped, with a
//! note, on machines without the Debian package dataset-fashion-mnist).

use dcgan_train::data::{DEFAULT_DIR, DataSource, Dataset, Shard};
use std::path::Path;

#[test]
fn default_data_is_fashion_mnist_train_set() {
    if !Path::new(DEFAULT_DIR).is_dir() {
        eprintln!("skipped: {DEFAULT_DIR} not installed (apt-get install dataset-fashion-mnist)");
        return;
    }
    let set = Dataset::load(&DataSource::parse(None).unwrap()).unwrap();
    assert_eq!((set.count, set.height, set.width), (60_000, 28, 28));
    assert_eq!(set.images.len(), 60_000 * 784);
    assert!(set.description.contains(DEFAULT_DIR), "{}", set.description);
    assert!(!set.description.contains('\n'));
    // The published per-pixel mean of the Fashion-MNIST training set is 0.2860 (of 255),
    // the constant every Normalize() for it uses: a wrong offset or a byte swap misses it.
    let mean = set.images.iter().map(|&p| p as f64).sum::<f64>() / set.images.len() as f64 / 255.0;
    assert!((mean - 0.2860).abs() < 0.0005, "mean {mean}");
    // Reading the same directory with --data DIR gives the same bytes.
    let again = Dataset::load(&DataSource::parse(Some(DEFAULT_DIR)).unwrap()).unwrap();
    assert_eq!(again.images, set.images);

    // One batch at 64x64 through the sampler: values in [-1, 1], background at -1.
    let shard = Shard::new(set.count, 0, 2, 64, 1).unwrap();
    assert_eq!(shard.batches_per_epoch(), 60_000 / 128);
    let order = shard.epoch(0);
    let mut batch = vec![0f32; 64 * 64 * 64];
    set.fill_batch(order.batch(0), 64, &mut batch);
    assert!(batch.iter().all(|v| (-1.0..=1.0).contains(v)));
    assert_eq!(batch[0], -1.0, "corner of a Fashion-MNIST image is black");
}
