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
