"""Documents translated with their layout kept: HTML (pages and fragments), .docx, .odt,
.srt subtitles and plain text, each read into blocks of pieces (pieces.py) and written back."""
