//! The 8x8 handwritten digits set (data/digits.csv.gz, see data/README.md for its source and
//! license), embedded in the library so examples and tests need no download.

use std::io::Read;

use polars::prelude::{Column, DataFrame};
use tch::{Kind, Tensor};

use rtune_driver::data::shuffle;
use rtune_driver::error::{Error, Result};

const DIGITS_CSV_GZ: &[u8] = include_bytes!("../data/digits.csv.gz");

/// Pixels per image and number of classes.
pub const DIGIT_FEATURES: usize = 64;
pub const DIGIT_CLASSES: usize = 10;

/// The label column of `Digits::frame`.
pub const DIGIT_LABEL: &str = "digit";

/// The name of pixel `j`'s column in `Digits::frame`.
pub fn pixel_column(j: usize) -> String {
    format!("pixel_{j}")
}

/// Images scaled to [0, 1] (row-major, 64 a row) and their labels.
#[derive(Debug, Clone, Default)]
pub struct Digits {
    pub features: Vec<f32>,
    pub labels: Vec<i64>,
}

/// The fixed train / validation / test split of a seed (70% / 15% / 15%).
#[derive(Debug, Clone)]
pub struct DigitsSplit {
    pub train: Digits,
    pub validation: Digits,
    pub test: Digits,
}

impl Digits {
    /// All 1,797 images.
    pub fn load() -> Result<Digits> {
        let mut text = String::new();
        flate2::read::GzDecoder::new(DIGITS_CSV_GZ)
            .read_to_string(&mut text)
            .map_err(|e| Error::io("data/digits.csv.gz (embedded)", e))?;
        let mut digits = Digits::default();
        for (n, line) in text.lines().enumerate() {
            let bad = |what: &str| Error::Worker(format!("digits.csv line {}: {what}", n + 1));
            let values: Vec<&str> = line.split(',').collect();
            if values.len() != DIGIT_FEATURES + 1 {
                return Err(bad("expected 65 comma-separated values"));
            }
            for v in &values[..DIGIT_FEATURES] {
                let pixel: f32 = v.trim().parse().map_err(|_| bad("pixel is not a number"))?;
                digits.features.push(pixel / 16.0);
            }
            digits.labels.push(values[DIGIT_FEATURES].trim().parse().map_err(|_| bad("label"))?);
        }
        Ok(digits)
    }

    /// The train / validation / test split for `seed`: the same seed always gives the same split.
    pub fn split(seed: u64) -> Result<DigitsSplit> {
        let all = Digits::load()?;
        let mut order: Vec<usize> = (0..all.len()).collect();
        shuffle(&mut order, seed);
        let n_train = all.len() * 70 / 100;
        let n_val = all.len() * 15 / 100;
        Ok(DigitsSplit {
            train: all.select(&order[..n_train]),
            validation: all.select(&order[n_train..n_train + n_val]),
            test: all.select(&order[n_train + n_val..]),
        })
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The rows at `indices`, in that order.
    pub fn select(&self, indices: &[usize]) -> Digits {
        let mut out = Digits {
            features: Vec::with_capacity(indices.len() * DIGIT_FEATURES),
            labels: Vec::with_capacity(indices.len()),
        };
        for &i in indices {
            out.features.extend_from_slice(&self.features[i * DIGIT_FEATURES..][..DIGIT_FEATURES]);
            out.labels.push(self.labels[i]);
        }
        out
    }

    /// As a table: the raw pixel values (0 to 16) in columns `pixel_0` .. `pixel_63` (Float32)
    /// and the class in `digit` (Int64), for `Dataset::frame`.
    pub fn frame(&self) -> Result<DataFrame> {
        let mut columns: Vec<Column> = (0..DIGIT_FEATURES)
            .map(|j| {
                let pixels: Vec<f32> =
                    (0..self.len()).map(|i| self.features[i * DIGIT_FEATURES + j] * 16.0).collect();
                Column::new(pixel_column(j).into(), pixels)
            })
            .collect();
        columns.push(Column::new(DIGIT_LABEL.into(), self.labels.clone()));
        Ok(DataFrame::new(self.len(), columns)?)
    }

    /// Features as an `[n, 64]` float tensor and labels as an `[n]` int64 tensor, on the CPU.
    pub fn tensors(&self) -> (Tensor, Tensor) {
        let x = Tensor::from_slice(&self.features).view([self.len() as i64, DIGIT_FEATURES as i64]);
        (x.to_kind(Kind::Float), Tensor::from_slice(&self.labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_load_and_split_fixed() {
        let all = Digits::load().unwrap();
        assert_eq!(all.len(), 1797);
        assert!(all.features.iter().all(|&p| (0.0..=1.0).contains(&p)));
        assert!(all.labels.iter().all(|&l| (0..10).contains(&l)));
        let a = Digits::split(0).unwrap();
        let b = Digits::split(0).unwrap();
        assert_eq!((a.train.len(), a.validation.len(), a.test.len()), (1257, 269, 271));
        assert_eq!(a.test.labels, b.test.labels);
        assert_ne!(a.test.labels, Digits::split(1).unwrap().test.labels);
    }

    #[test]
    fn the_frame_holds_raw_pixels_and_labels() {
        let split = Digits::split(0).unwrap();
        let frame = split.test.frame().unwrap();
        assert_eq!(frame.shape(), (271, 65));
        let pixels = frame.column("pixel_30").unwrap().f32().unwrap();
        assert!(pixels.into_no_null_iter().all(|p| (0.0..=16.0).contains(&p) && p.fract() == 0.0));
        assert!(pixels.into_no_null_iter().any(|p| p > 1.0), "raw values, not scaled to [0, 1]");
        let labels: Vec<i64> =
            frame.column(DIGIT_LABEL).unwrap().i64().unwrap().into_no_null_iter().collect();
        assert_eq!(labels, split.test.labels);
    }
}
