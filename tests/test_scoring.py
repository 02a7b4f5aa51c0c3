from omnid.evaluation.scoring import ErrorRate, edit_distance, tokens


def test_english_normalisation_follows_evaluation_md():
    assert tokens("Hello, World! It's 'quoted' — ＡＢＣ", "en") == ["hello", "world", "it's", "quoted", "abc"]


def test_chinese_tokens_are_characters_and_latin_runs():
    assert tokens("我爱GPU 3 个", "zh") == ["我", "爱", "gpu", "3", "个"]


def test_word_error_rate():
    rate = ErrorRate()
    assert rate.add("the cat sat on the mat", "the cat sit on mat", "en") == 2
    assert edit_distance([], ["a"]) == 1
    assert round(rate.percent, 2) == 33.33


def test_mixed_chinese_english_is_mer_with_the_chinese_tokenisation():
    from omnid.evaluation.scoring import metric_name

    assert tokens("我用 Kubernetes 部署", "mixed") == ["我", "用", "kubernetes", "部", "署"]
    assert [metric_name(x) for x in ("en", "de", "zh", "mixed", "zh-en")] == ["WER", "WER", "CER", "MER", "MER"]
