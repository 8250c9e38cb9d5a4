decide = _user.decide

