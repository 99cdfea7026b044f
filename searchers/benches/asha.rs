fn main() {} // placeholder until the bench is written
