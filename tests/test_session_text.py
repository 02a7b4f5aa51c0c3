from omnid.realtime.text import LocalAgreement, join_segments


def test_join_spaces_only_between_spaced_scripts():
    assert join_segments(["Hello there.", " How are you?"]) == "Hello there. How are you?"
    assert join_segments(["我们今天", "开会。"]) == "我们今天开会。"
    assert join_segments(["Meeting at 3pm", "我们开会"]) == "Meeting at 3pm我们开会"
    assert join_segments(["こんにちは", "world"]) == "こんにちはworld"
    assert join_segments(["안녕하세요", "여러분"]) == "안녕하세요 여러분"
    assert join_segments(["สวัสดี", "ครับ"]) == "สวัสดีครับ"
    assert join_segments(["ＡＢＣ", "def"]) == "ＡＢＣdef"
    assert join_segments(["", "  a ", "", "b"]) == "a b"


def test_local_agreement_commits_what_two_hypotheses_share_append_only():
    agree = LocalAgreement()
    deltas = [agree.update(h) for h in [
        "and so my",  # nothing to agree with yet
        "and so my fellow",  # "and so my" agreed
        "and so my fellow Americans ask",  # "fellow" agreed
        "and so my fellow Americans, ask not",  # "Americans" changed its punctuation: nothing new
        "and so my fellow Americans, ask not what",  # "Americans, ask not" agreed
    ]]
    assert deltas == ["", "and so my", " fellow", "", " Americans, ask not"]
    assert "".join(deltas) == agree.text() == "and so my fellow Americans, ask not"


def test_local_agreement_never_retracts_committed_words():
    agree = LocalAgreement()
    agree.update("the cat sat")
    assert agree.update("the cat sat down") == "the cat sat"
    assert agree.update("a cat sat down") == ""  # a revision of committed text is not sent again
    assert agree.text() == "the cat sat"


def test_local_agreement_holds_back_each_hypothesis_last_word():
    agree = LocalAgreement(hold_back=1)
    assert agree.update("printing") == ""
    assert agree.update("Printing, in the") == ""  # "printing" was the last word of its hypothesis
    assert agree.update("Printing, in the only") == "Printing, in"  # "the" is the previous one's last word
    assert agree.update("Printing, in the only sense") == " the"
    assert agree.text() == "Printing, in the"


def test_an_observed_hypothesis_lets_the_next_one_commit_but_commits_nothing_itself():
    agree = LocalAgreement(hold_back=1)
    agree.observe("then in the same")
    assert agree.text() == ""
    assert agree.update("Then in the same operations") == ""  # the first word differs: nothing agreed
    fresh = LocalAgreement(hold_back=1)
    fresh.observe("than in the same")
    assert fresh.update("than in the same operations") == "than in the"
    assert fresh.update("than in the same operations with") == " same"


def test_a_growing_streams_deltas_are_its_complete_words_spaces_as_they_are():
    from omnid.realtime.text import GrowingText

    g = GrowingText()
    assert g.update("Hel") == "" and g.update("Hello wor") == "Hello "
    assert g.update("Hello world,  and") == "world,  " and g.text() == "Hello world,  "
    assert g.update("Hello world,  and") == ""  # nothing new
    assert g.update("Hello there") == ""  # not a continuation of what was sent: nothing more is sent
    assert g.update("Hello world,  and so ") == "and " and g.text() == "Hello world,  and "
