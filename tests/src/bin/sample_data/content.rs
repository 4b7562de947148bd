//! The texts of the sample dataset: organizations and study titles, participants, questions and answers.

/// (organization, short name, its writers' UTC offset in hours, study titles).
/// Titles: four completed studies, then draft, in progress, reopened, deleted.
pub const ORGS: [(&str, &str, i32, [&str; 8]); 3] = [
    (
        "org_acme",
        "acme",
        0,
        [
            "Onboarding friction — Q1 2026",
            "Pricing page comprehension",
            "Churn interviews: SMB accounts",
            "Mobile app offline mode",
            "Checkout redesign (draft)",
            "Enterprise SSO needs",
            "Support chatbot satisfaction",
            "Test study — please ignore",
        ],
    ),
    (
        "org_globex",
        "globex",
        1,
        [
            "Warehouse scanner ergonomics",
            "Fleet dashboard: first impressions",
            "Invoice automation pilot",
            "Partner portal usability",
            "Loyalty programme ideas",
            "Driver app notifications",
            "Returns process review",
            "Duplicate of pilot study",
        ],
    ),
    (
        "org_initech",
        "initech",
        -5,
        [
            "TPS report workflow",
            "Cover sheet adoption",
            "Printer fleet satisfaction",
            "Cubicle layout survey",
            "Stapler preferences",
            "Migration to the new ledger",
            "Help desk response times",
            "Old survey (deleted)",
        ],
    ),
];

/// Participants: (first name, last name, language of their answers: 0 = English).
pub const PEOPLE: [(&str, &str, usize); 16] = [
    ("Ólafur", "Jónsson", 1),
    ("Zoë", "Ørsted", 0),
    ("Łukasz", "Żółw", 2),
    ("José", "Núñez", 3),
    ("小明", "王", 4),
    ("Ada", "Lovelace", 0),
    ("Chloé", "Dupré", 5),
    ("Siobhán", "Ó Briain", 0),
    ("Håkon", "Ærø", 0),
    ("Ömer", "Şahin", 0),
    ("Ngozi", "Okonkwo", 0),
    ("E\u{301}milie", "E\u{301}tienne", 5),
    ("Søren", "Kierkegaard", 0),
    ("Dương", "Nguyễn", 0),
    ("Anaïs", "Lévesque", 0),
    ("María José", "de la Cruz", 3),
];

pub const QUESTIONS: [&str; 5] = [
    "Can you walk me through the last time you used the product?",
    "What was the most frustrating part of that?",
    "How did you work around it?",
    "If you could change one thing, what would it be?",
    "How does this compare with the tool you used before?",
];

/// Answers per language: (original text, English translation; empty for English).
pub const ANSWERS: [[(&str, &str); 3]; 6] = [
    [
        ("Sure. I logged in on Monday morning to export last week's numbers for our team meeting.", ""),
        ("Finding the export button took me a while; it's hidden under the settings menu.", ""),
        ("I asked a colleague, and now I keep a bookmark to the export page.", ""),
    ],
    [
        (
            "Já, ég skráði mig inn á mánudagsmorgni til að sækja tölurnar.",
            "Yes, I logged in on Monday morning to fetch the numbers.",
        ),
        ("Það var erfitt að finna útflutningshnappinn.", "It was hard to find the export button."),
        ("Ég spurði samstarfsmann.", "I asked a colleague."),
    ],
    [
        (
            "Tak, zalogowałem się w poniedziałek rano, żeby wyeksportować dane.",
            "Yes, I logged in on Monday morning to export the data.",
        ),
        (
            "Najbardziej frustrujące było szukanie przycisku eksportu.",
            "The most frustrating part was looking for the export button.",
        ),
        ("Zapytałem kolegę z zespołu.", "I asked a teammate."),
    ],
    [
        (
            "Claro. Entré el lunes por la mañana para exportar los números de la semana pasada.",
            "Sure. I logged in on Monday morning to export last week's numbers.",
        ),
        (
            "Lo más frustrante fue encontrar el botón de exportar.",
            "The most frustrating part was finding the export button.",
        ),
        ("Le pregunté a una compañera y ahora tengo un marcador.", "I asked a colleague and now I have a bookmark."),
    ],
    [
        ("我周一早上登录，导出了上周的数据。", "I logged in on Monday morning and exported last week's data."),
        ("最麻烦的是找不到导出按钮。", "The most annoying part was not finding the export button."),
        ("我问了同事，现在我把导出页面加了书签。", "I asked a colleague, and now I have bookmarked the export page."),
    ],
    [
        (
            "Oui, je me suis connectée lundi matin pour exporter les chiffres.",
            "Yes, I logged in on Monday morning to export the numbers.",
        ),
        (
            "Le plus pénible, c'était de trouver le bouton d'export.",
            "The most annoying thing was finding the export button.",
        ),
        ("J'ai demandé à une collègue.", "I asked a colleague."),
    ],
];

pub const EXTRA_ANSWERS: [&str; 2] = [
    "I'd make the dashboard load faster on my laptop; it takes about ten seconds.",
    "The old tool was cheaper, but this one saves me an hour a week.",
];

/// An answer with the characters WebVTT must escape and a blank line, which a cue cannot hold.
pub const TRICKY_ANSWER: &str = "Honestly? Price & speed: <b>fast</b> beats cheap -> every time.\n\n\
                             And a second thought, after a blank line: 3 < 5 && 5 > 3.";
